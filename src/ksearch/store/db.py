"""A run on disk, as its search process writes it: runs/<run-id>/ holds run.db (SQLite, WAL, one commit per
evaluation) and plain files.

Only the search process opens the database for writing; workers never learn where it is. Every other process reads
a run through read.py (read-only).

Layout:
  run.db                 tables meta, candidates, evaluations, world_models, calls, events (schema.py)
  config.json            the run configuration as started
  candidates/<id>.py     every candidate's source
  world_model.json       the latest world-model snapshot (every snapshot is in the world_models table)
  best.py                the best candidate so far
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict
from pathlib import Path
from typing import Any

from ksearch.store import queries
from ksearch.store.paths import RunNotFound
from ksearch.store.records import CandidateRow
from ksearch.store.schema import SCHEMA, SCHEMA_VERSION


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
        # In one transaction, so that a reader never sees a database with only some of the tables.
        self.db.executescript(f"BEGIN;{SCHEMA}COMMIT;")
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
        return queries.meta_value(self.db, key, default)

    def meta(self) -> dict[str, Any]:
        return dict(queries.meta(self.db).values)

    # -- candidates and evaluations ------------------------------------------------------------------------------
    def add_candidate(self, source: str, normalized: str, round_: int, node_id: str | None, parent_id: str | None,
                      action_title: str | None, mode: str | None, params: dict[str, Any],
                      duplicate_of: str | None = None) -> CandidateRow:
        seq = queries.candidate_count(self.db)
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
        return queries.first_with_normalized_hash(self.db, _h(normalized))

    def candidate(self, cid: str) -> CandidateRow:
        row = queries.candidate(self.db, cid)
        if row is None:
            raise KeyError(f"no candidate {cid}")
        return row

    def candidates(self) -> list[CandidateRow]:
        return queries.candidates(self.db)

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

    # The search process's own reads return plain dicts (the columns, JSON decoded); read.py gives typed records.
    def evaluations(self, kind: str | None = "search") -> list[dict[str, Any]]:
        return [asdict(e) for e in queries.evaluations(self.db, kind)]

    # -- world model, calls, events ------------------------------------------------------------------------------
    def add_world_model(self, round_: int, wm: dict[str, Any], reason: str) -> None:
        text = json.dumps(wm, indent=1)
        self.db.execute("INSERT INTO world_models(round, created_at, reason, json) VALUES (?,?,?,?)",
                        (round_, time.time(), reason, text))
        tmp = self.path / "world_model.json.tmp"
        tmp.write_text(text)
        tmp.replace(self.path / "world_model.json")

    def world_models(self) -> list[dict[str, Any]]:
        return [{"round": w.round, "reason": w.reason, "created_at": w.created_at, "world_model": w.world_model}
                for w in queries.world_models(self.db)]

    def latest_world_model(self) -> dict[str, Any] | None:
        w = queries.latest_world_model(self.db)
        return w.world_model if w is not None else None

    def add_call(self, round_: int, call: Any) -> None:
        self.db.execute(
            "INSERT INTO calls(created_at, round, role, model, prompt, response, tokens_in, tokens_out, latency_s, "
            "cost_usd, retries, error) VALUES (?,?,?,?,?,?,?,?,?,?,?,?)",
            (time.time(), round_, call.role, call.model, call.prompt, call.response, call.tokens_in, call.tokens_out,
             call.latency_s, call.cost_usd, call.retries, call.error),
        )

    def calls(self) -> list[dict[str, Any]]:
        return [asdict(c) for c in queries.calls(self.db, texts=True)]

    def add_event(self, round_: int, kind: str, data: dict[str, Any]) -> None:
        self.db.execute("INSERT INTO events(created_at, round, kind, data) VALUES (?,?,?,?)",
                        (time.time(), round_, kind, json.dumps(data, default=str)))

    def events(self, kind: str | None = None) -> list[dict[str, Any]]:
        return [asdict(e) for e in queries.events(self.db, kind)]

    def write_best(self, source: str) -> None:
        tmp = self.path / "best.py.tmp"
        tmp.write_text(source)
        tmp.replace(self.path / "best.py")


def _h(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()

