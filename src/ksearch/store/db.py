"""A run on disk: runs/<run-id>/ holds run.db (SQLite, WAL, one commit per evaluation) and plain files.

Only the search process opens the database; workers never learn where it is.

Layout:
  run.db                 tables meta, candidates, evaluations, world_models, calls, events (schema below)
  config.json            the run configuration as started
  candidates/<id>.py     every candidate's source
  world_model.json       the latest world-model snapshot (every snapshot is in the world_models table)
  best.py                the best candidate so far
"""

from __future__ import annotations

import hashlib
import json
import os
import sqlite3
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ksearch.errors import RunNotFound

SCHEMA_VERSION = 1

SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS candidates (
  id TEXT PRIMARY KEY, seq INTEGER NOT NULL, created_at REAL NOT NULL, round INTEGER NOT NULL,
  node_id TEXT, parent_id TEXT, action_title TEXT, mode TEXT, params TEXT NOT NULL DEFAULT '{}',
  source_hash TEXT NOT NULL, normalized_hash TEXT NOT NULL, path TEXT NOT NULL, duplicate_of TEXT
);
CREATE TABLE IF NOT EXISTS evaluations (
  id INTEGER PRIMARY KEY AUTOINCREMENT, candidate_id TEXT NOT NULL REFERENCES candidates(id),
  eval_index INTEGER NOT NULL, created_at REAL NOT NULL, round INTEGER NOT NULL, kind TEXT NOT NULL,
  status TEXT NOT NULL, score REAL NOT NULL, holdout_score REAL, duration_s REAL, message TEXT,
  result TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS world_models (
  id INTEGER PRIMARY KEY AUTOINCREMENT, round INTEGER NOT NULL, created_at REAL NOT NULL, reason TEXT,
  json TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS calls (
  id INTEGER PRIMARY KEY AUTOINCREMENT, created_at REAL NOT NULL, round INTEGER NOT NULL, role TEXT NOT NULL,
  model TEXT, prompt TEXT NOT NULL, response TEXT NOT NULL, tokens_in INTEGER, tokens_out INTEGER,
  latency_s REAL, cost_usd REAL, retries INTEGER, error TEXT
);
CREATE TABLE IF NOT EXISTS events (
  id INTEGER PRIMARY KEY AUTOINCREMENT, created_at REAL NOT NULL, round INTEGER NOT NULL, kind TEXT NOT NULL,
  data TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS evaluations_candidate ON evaluations(candidate_id);
CREATE INDEX IF NOT EXISTS candidates_norm ON candidates(normalized_hash);
"""


def new_run_id(task: str) -> str:
    return f"{time.strftime('%Y%m%d-%H%M%S')}-{task}-{uuid.uuid4().hex[:6]}"


def runs_dir(explicit: str | Path | None = None) -> Path:
    return Path(explicit or os.environ.get("KSEARCH_RUNS_DIR") or "runs")


def resolve_run(ref: str | Path, base: str | Path | None = None) -> Path:
    """A run id (looked up under the runs directory) or a path to a run directory."""
    p = Path(ref)
    for cand in (p, runs_dir(base) / str(ref)):
        if (cand / "run.db").is_file():
            return cand
    raise RunNotFound(f"no run {ref!r}: not a run directory, and not found under {runs_dir(base)}/ "
                      "(see `ksearch runs`, or pass --runs-dir)")


@dataclass
class CandidateRow:
    id: str
    seq: int
    round: int
    node_id: str | None
    parent_id: str | None
    action_title: str | None
    mode: str | None
    params: dict[str, Any]
    path: str
    duplicate_of: str | None

    def source(self, run_dir: Path) -> str:
        return (run_dir / self.path).read_text()


class RunStore:
    def __init__(self, path: Path, create: bool = False) -> None:
        self.path = Path(path)
        if create:
            self.path.mkdir(parents=True, exist_ok=True)
            (self.path / "candidates").mkdir(exist_ok=True)
        elif not (self.path / "run.db").is_file():
            raise RunNotFound(f"{self.path} is not a run directory (no run.db)")
        self.db = sqlite3.connect(self.path / "run.db", isolation_level=None, timeout=30)
        self.db.row_factory = sqlite3.Row
        self.db.execute("PRAGMA journal_mode=WAL")
        self.db.execute("PRAGMA synchronous=NORMAL")
        self.db.executescript(SCHEMA)
        if create:
            self.set_meta("schema_version", SCHEMA_VERSION)

    # -- transactions: one commit per evaluation ---------------------------------------------------------------
    @contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        self.db.execute("BEGIN IMMEDIATE")
        try:
            yield self.db
        except BaseException:
            self.db.execute("ROLLBACK")
            raise
        self.db.execute("COMMIT")

    def close(self) -> None:
        self.db.close()

    # -- meta ----------------------------------------------------------------------------------------------------
    def set_meta(self, key: str, value: Any) -> None:
        self.db.execute("INSERT OR REPLACE INTO meta(key, value) VALUES (?, ?)", (key, json.dumps(value)))

    def get_meta(self, key: str, default: Any = None) -> Any:
        row = self.db.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        return json.loads(row["value"]) if row else default

    def meta(self) -> dict[str, Any]:
        return {r["key"]: json.loads(r["value"]) for r in self.db.execute("SELECT key, value FROM meta")}

    # -- candidates and evaluations ------------------------------------------------------------------------------
    def add_candidate(self, source: str, normalized: str, round_: int, node_id: str | None, parent_id: str | None,
                      action_title: str | None, mode: str | None, params: dict[str, Any],
                      duplicate_of: str | None = None) -> CandidateRow:
        seq = self.db.execute("SELECT COUNT(*) FROM candidates").fetchone()[0]
        cid = f"c{seq:04d}"
        rel = f"candidates/{cid}.py"
        (self.path / rel).write_text(source)
        self.db.execute(
            "INSERT INTO candidates(id, seq, created_at, round, node_id, parent_id, action_title, mode, params, "
            "source_hash, normalized_hash, path, duplicate_of) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?)",
            (cid, seq, time.time(), round_, node_id, parent_id, action_title, mode, json.dumps(params),
             _h(source), _h(normalized), rel, duplicate_of),
        )
        return self.candidate(cid)

    def find_normalized(self, normalized: str) -> str | None:
        row = self.db.execute(
            "SELECT id FROM candidates WHERE normalized_hash = ? AND duplicate_of IS NULL ORDER BY seq LIMIT 1",
            (_h(normalized),),
        ).fetchone()
        return row["id"] if row else None

    def candidate(self, cid: str) -> CandidateRow:
        r = self.db.execute("SELECT * FROM candidates WHERE id = ?", (cid,)).fetchone()
        if r is None:
            raise KeyError(f"no candidate {cid}")
        return CandidateRow(r["id"], r["seq"], r["round"], r["node_id"], r["parent_id"], r["action_title"],
                            r["mode"], json.loads(r["params"]), r["path"], r["duplicate_of"])

    def candidates(self) -> list[CandidateRow]:
        return [self.candidate(r["id"]) for r in self.db.execute("SELECT id FROM candidates ORDER BY seq")]

    def add_evaluation(self, candidate_id: str, eval_index: int, round_: int, kind: str,
                       result: dict[str, Any]) -> None:
        """kind: search (counts against the budget), holdout (the final re-evaluation), baseline."""
        self.db.execute(
            "INSERT INTO evaluations(candidate_id, eval_index, created_at, round, kind, status, score, holdout_score, "
            "duration_s, message, result) VALUES (?,?,?,?,?,?,?,?,?,?,?)",
            (candidate_id, eval_index, time.time(), round_, kind, result["status"], float(result.get("score") or 0),
             result.get("holdout_score"), result.get("duration_s"), (result.get("message") or "")[:4000],
             json.dumps(result, default=str)),
        )

    def evaluations(self, kind: str | None = "search") -> list[dict[str, Any]]:
        q = "SELECT * FROM evaluations" + (" WHERE kind = ?" if kind else "") + " ORDER BY id"
        rows = self.db.execute(q, (kind,) if kind else ())
        out = []
        for r in rows:
            d = dict(r)
            d["result"] = json.loads(d["result"])
            out.append(d)
        return out

    # -- world model, calls, events ------------------------------------------------------------------------------
    def add_world_model(self, round_: int, wm: dict[str, Any], reason: str) -> None:
        text = json.dumps(wm, indent=1)
        self.db.execute("INSERT INTO world_models(round, created_at, reason, json) VALUES (?,?,?,?)",
                        (round_, time.time(), reason, text))
        tmp = self.path / "world_model.json.tmp"
        tmp.write_text(text)
        tmp.replace(self.path / "world_model.json")

    def world_models(self) -> list[dict[str, Any]]:
        return [{"round": r["round"], "reason": r["reason"], "created_at": r["created_at"],
                 "world_model": json.loads(r["json"])}
                for r in self.db.execute("SELECT * FROM world_models ORDER BY id")]

    def latest_world_model(self) -> dict[str, Any] | None:
        r = self.db.execute("SELECT json FROM world_models ORDER BY id DESC LIMIT 1").fetchone()
        return json.loads(r["json"]) if r else None

    def add_call(self, round_: int, call: Any) -> None:
        self.db.execute(
            "INSERT INTO calls(created_at, round, role, model, prompt, response, tokens_in, tokens_out, latency_s, "
            "cost_usd, retries, error) VALUES (?,?,?,?,?,?,?,?,?,?,?,?)",
            (time.time(), round_, call.role, call.model, call.prompt, call.response, call.tokens_in, call.tokens_out,
             call.latency_s, call.cost_usd, call.retries, call.error),
        )

    def calls(self) -> list[dict[str, Any]]:
        return [dict(r) for r in self.db.execute("SELECT * FROM calls ORDER BY id")]

    def add_event(self, round_: int, kind: str, data: dict[str, Any]) -> None:
        self.db.execute("INSERT INTO events(created_at, round, kind, data) VALUES (?,?,?,?)",
                        (time.time(), round_, kind, json.dumps(data, default=str)))

    def events(self, kind: str | None = None) -> list[dict[str, Any]]:
        q = "SELECT * FROM events" + (" WHERE kind = ?" if kind else "") + " ORDER BY id"
        return [{**dict(r), "data": json.loads(r["data"])} for r in self.db.execute(q, (kind,) if kind else ())]

    def write_best(self, source: str) -> None:
        tmp = self.path / "best.py.tmp"
        tmp.write_text(source)
        tmp.replace(self.path / "best.py")


def _h(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def list_runs(base: str | Path | None = None) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    root = runs_dir(base)
    if not root.is_dir():
        return out
    for d in sorted(root.iterdir()):
        if not (d / "run.db").is_file():
            continue
        try:
            s = RunStore(d)
            m = s.meta()
            s.close()
        except sqlite3.Error:
            continue
        out.append({"id": d.name, "path": str(d), **{k: m.get(k) for k in (
            "task", "backend", "policy", "strategy", "budget", "evaluations_done", "best_score", "status",
            "created_at")}})
    return out
