"""A run on disk, as its search process writes it: runs/<run-id>/ holds run.db (SQLite, WAL, one commit per
evaluation) and plain files.

Only the search process opens the database for writing; workers never learn where it is. Every other process reads
a run through read.py (read-only).

Layout:
  run.db                 tables meta, candidates, evaluations, world_models, calls, events, texts, profiles
                         (schema.py)
  config.json            the run configuration as started
  candidates/<id>.py     every candidate's source
  world_model.json       the latest world-model snapshot (every snapshot is in the world_models table)
  best.py                the best candidate so far

Every text written here goes through the process's Redactor first (redact.py): no registered secret reaches the
disk, whoever hands it to the store.

The loop state is committed with every evaluation. What grows in it (the analysis, the last source, a verdict's
message: any string of STATE_TEXT_CHARS or more) is stored once, by content (the texts table, or the candidate
file of the same source), and the state refers to it; so a commit writes what is new, not the whole state again.
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

from ksearch.errors import RunUnreadable
from ksearch.store import queries
from ksearch.store.paths import RunNotFound
from ksearch.store.records import CandidateRow
from ksearch.store.redact import SECRETS, Redactor
from ksearch.store.schema import SCHEMA, SCHEMA_VERSION

#: Strings in a stored state this long or longer are kept by reference (set_state).
STATE_TEXT_CHARS = 512
#: How a reference looks inside a stored state: {"$text": "<sha256 of the text>"}.
TEXT_REF = "$text"


class RunStore:
    def __init__(self, path: Path, create: bool = False, redactor: Redactor | None = None) -> None:
        self.path = Path(path)
        self.redactor = SECRETS if redactor is None else redactor
        if create:
            self.path.mkdir(parents=True, exist_ok=True)
            (self.path / "candidates").mkdir(exist_ok=True)
        elif not (self.path / "run.db").is_file():
            raise RunNotFound(f"{self.path} is not a run directory (no run.db)")
        self.db = sqlite3.connect(self.path / "run.db", isolation_level=None, timeout=30)
        self.db.row_factory = sqlite3.Row
        self.db.execute("PRAGMA journal_mode=WAL")
        self.db.execute("PRAGMA synchronous=NORMAL")
        version = queries.meta_value(self.db, "schema_version") if not create and _has_meta(self.db) else None
        if isinstance(version, int) and version > SCHEMA_VERSION:
            self.db.close()
            raise RunUnreadable(f"{self.path}/run.db was written by a newer ksearch (schema {version}; this one "
                                f"writes {SCHEMA_VERSION}): upgrade ksearch to continue it")
        # In one transaction, so that a reader never sees a database with only some of the tables.
        self.db.executescript(f"BEGIN;{SCHEMA}COMMIT;")
        self._version = SCHEMA_VERSION if create else (version if isinstance(version, int) else 1)
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
        self.db.execute("INSERT OR REPLACE INTO meta(key, value) VALUES (?, ?)",
                        (key, self._clean(json.dumps(value, default=str))))

    def delete_meta(self, key: str) -> None:
        self.db.execute("DELETE FROM meta WHERE key = ?", (key,))

    def get_meta(self, key: str, default: Any = None) -> Any:
        return queries.meta_value(self.db, key, default)

    def meta(self) -> dict[str, Any]:
        return dict(queries.meta(self.db).values)

    def write_json(self, name: str, value: Any) -> None:
        """A JSON file in the run directory (config.json), redacted like everything else the store writes."""
        (self.path / name).write_text(self._clean(json.dumps(value, indent=2, default=str)))

    # -- state kept by reference ---------------------------------------------------------------------------------
    def set_state(self, key: str, state: Any) -> None:
        """Like set_meta, with every string of STATE_TEXT_CHARS or more stored once by content and referred to."""
        if self._version < SCHEMA_VERSION:  # a run of an older layout, continued: it now holds references
            self.set_meta("schema_version", SCHEMA_VERSION)
            self._version = SCHEMA_VERSION
        self.set_meta(key, self._by_reference(state))

    def get_state(self, key: str, default: Any = None) -> Any:
        value = self.get_meta(key)
        return default if value is None else self._resolve(value)

    def put_text(self, text: str) -> str:
        """Store a text once, by content; its hash. A text that is some candidate's source is that file."""
        text = self._clean(text)
        h = _h(text)
        if queries.has_source_hash(self.db, h):
            return h
        self.db.execute("INSERT OR IGNORE INTO texts(hash, text) VALUES (?, ?)", (h, text))
        return h

    def get_text(self, h: str) -> str:
        text = queries.text(self.db, h)
        if text is not None:
            return text
        rel = queries.path_of_source_hash(self.db, h)
        if rel is None:
            raise RunUnreadable(f"{self.path}/run.db: the stored state refers to a text {h[:12]} that is missing")
        return (self.path / rel).read_text()

    def _by_reference(self, value: Any) -> Any:
        if isinstance(value, str):
            return {TEXT_REF: self.put_text(value)} if len(value) >= STATE_TEXT_CHARS else value
        if isinstance(value, dict):
            return {k: self._by_reference(v) for k, v in value.items()}
        if isinstance(value, list | tuple):
            return [self._by_reference(v) for v in value]
        return value

    def _resolve(self, value: Any) -> Any:
        if isinstance(value, dict):
            if len(value) == 1 and isinstance(value.get(TEXT_REF), str):
                return self.get_text(value[TEXT_REF])
            return {k: self._resolve(v) for k, v in value.items()}
        if isinstance(value, list):
            return [self._resolve(v) for v in value]
        return value

    def _clean(self, text: str) -> str:
        return self.redactor.text(text)

    # -- candidates and evaluations ------------------------------------------------------------------------------
    def add_candidate(self, source: str, normalized: str, round_: int, node_id: str | None, parent_id: str | None,
                      action_title: str | None, mode: str | None, params: dict[str, Any],
                      duplicate_of: str | None = None) -> CandidateRow:
        seq = queries.candidate_count(self.db)
        cid = f"c{seq:04d}"
        rel = f"candidates/{cid}.py"
        source, normalized = self._clean(source), self._clean(normalized)
        (self.path / rel).write_text(source)
        self.db.execute(
            "INSERT INTO candidates(id, seq, created_at, round, node_id, parent_id, action_title, mode, params, "
            "source_hash, normalized_hash, path, duplicate_of) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?)",
            (cid, seq, time.time(), round_, node_id, parent_id, action_title and self._clean(action_title), mode,
             self._clean(json.dumps(params, default=str)), _h(source), _h(normalized), rel, duplicate_of),
        )
        return self.candidate(cid)

    def find_normalized(self, normalized: str) -> str | None:
        return queries.first_with_normalized_hash(self.db, _h(self._clean(normalized)))

    def candidate(self, cid: str) -> CandidateRow:
        row = queries.candidate(self.db, cid)
        if row is None:
            raise KeyError(f"no candidate {cid}")
        return row

    def candidates(self) -> list[CandidateRow]:
        return queries.candidates(self.db)

    def add_evaluation(self, candidate_id: str, eval_index: int, round_: int, kind: str,
                       result: dict[str, Any]) -> None:
        """kind: search (counts against the budget), holdout (the final re-evaluation), confirm (the best few timed
        again at the end, search/confirm.py), baseline."""
        self.db.execute(
            "INSERT INTO evaluations(candidate_id, eval_index, created_at, round, kind, status, score, holdout_score, "
            "duration_s, message, result) VALUES (?,?,?,?,?,?,?,?,?,?,?)",
            (candidate_id, eval_index, time.time(), round_, kind, result["status"], float(result.get("score") or 0),
             result.get("holdout_score"), result.get("duration_s"), self._clean((result.get("message") or "")[:4000]),
             self._clean(json.dumps(result, default=str))),
        )

    def add_profile(self, candidate_id: str, round_: int, report: dict[str, Any]) -> None:
        """One profiled candidate (harness/profile.py: ProfileReport as JSON)."""
        self.db.execute(
            "INSERT INTO profiles(candidate_id, created_at, round, backend, workload, status, note, data) "
            "VALUES (?,?,?,?,?,?,?,?)",
            (candidate_id, time.time(), round_, str(report.get("backend") or ""), str(report.get("workload") or ""),
             str(report.get("status") or ""), self._clean(str(report.get("note") or "")),
             self._clean(json.dumps(report, default=str))))

    def profile_of(self, candidate_id: str) -> dict[str, Any] | None:
        """The latest profile of a candidate (its report as JSON), or None."""
        rows = queries.profiles(self.db, candidate_id)
        return rows[-1].data if rows else None

    # The search process's own reads return plain dicts (the columns, JSON decoded); read.py gives typed records.
    def evaluations(self, kind: str | None = "search") -> list[dict[str, Any]]:
        return [asdict(e) for e in queries.evaluations(self.db, kind)]

    # -- world model, calls, events ------------------------------------------------------------------------------
    def add_world_model(self, round_: int, wm: dict[str, Any], reason: str) -> None:
        text = self._clean(json.dumps(wm, indent=1, default=str))
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
            (time.time(), round_, call.role, self._clean(call.model or ""), self._clean(call.prompt),
             self._clean(call.response), call.tokens_in, call.tokens_out, call.latency_s, call.cost_usd, call.retries,
             None if call.error is None else self._clean(call.error)),
        )

    def call_count(self) -> int:
        return queries.call_count(self.db)

    def calls(self) -> list[dict[str, Any]]:
        return [asdict(c) for c in queries.calls(self.db, texts=True)]

    def add_event(self, round_: int, kind: str, data: dict[str, Any]) -> None:
        self.db.execute("INSERT INTO events(created_at, round, kind, data) VALUES (?,?,?,?)",
                        (time.time(), round_, kind, self._clean(json.dumps(data, default=str))))

    def events(self, kind: str | None = None) -> list[dict[str, Any]]:
        return [asdict(e) for e in queries.events(self.db, kind)]

    def write_best(self, source: str) -> None:
        tmp = self.path / "best.py.tmp"
        tmp.write_text(self._clean(source))
        tmp.replace(self.path / "best.py")


def _has_meta(db: sqlite3.Connection) -> bool:
    return "meta" in queries.table_names(db)


def _h(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()

