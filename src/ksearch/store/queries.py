"""Every SELECT on run.db, shared by the writer (RunStore, in the search process) and the read-only RunReader.

Each takes an open connection whose row_factory is sqlite3.Row and returns typed records (records.py).
"""

from __future__ import annotations

import sqlite3
from typing import Any

from ksearch.store.records import (
    CallRow,
    CandidateRow,
    EvaluationRow,
    EventRow,
    ProfileRow,
    RunMeta,
    WorldModelRow,
    call_from_row,
    candidate_from_row,
    evaluation_from_row,
    event_from_row,
    loads,
    profile_from_row,
    world_model_from_row,
)

#: The calls table without its two large text columns: what a report needs of every call.
_CALL_FIGURES = "id, created_at, round, role, model, tokens_in, tokens_out, latency_s, cost_usd, retries, error"


def table_names(db: sqlite3.Connection) -> set[str]:
    return {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}


def meta(db: sqlite3.Connection) -> RunMeta:
    return RunMeta({r["key"]: loads(r["value"]) for r in db.execute("SELECT key, value FROM meta")})


def meta_value(db: sqlite3.Connection, key: str, default: Any = None) -> Any:
    row = db.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
    return loads(row["value"]) if row else default


def candidate_count(db: sqlite3.Connection) -> int:
    return int(db.execute("SELECT COUNT(*) FROM candidates").fetchone()[0])


def candidate(db: sqlite3.Connection, cid: str) -> CandidateRow | None:
    r = db.execute("SELECT * FROM candidates WHERE id = ?", (cid,)).fetchone()
    return candidate_from_row(r) if r is not None else None


def candidates(db: sqlite3.Connection) -> list[CandidateRow]:
    return [candidate_from_row(r) for r in db.execute("SELECT * FROM candidates ORDER BY seq")]


def first_with_normalized_hash(db: sqlite3.Connection, normalized_hash: str) -> str | None:
    """The first original (not itself a duplicate) candidate with this normalized source."""
    row = db.execute(
        "SELECT id FROM candidates WHERE normalized_hash = ? AND duplicate_of IS NULL ORDER BY seq LIMIT 1",
        (normalized_hash,),
    ).fetchone()
    return str(row["id"]) if row else None


def has_source_hash(db: sqlite3.Connection, source_hash: str) -> bool:
    return db.execute("SELECT 1 FROM candidates WHERE source_hash = ? LIMIT 1", (source_hash,)).fetchone() is not None


def path_of_source_hash(db: sqlite3.Connection, source_hash: str) -> str | None:
    row = db.execute("SELECT path FROM candidates WHERE source_hash = ? ORDER BY seq LIMIT 1", (source_hash,)).fetchone()
    return str(row["path"]) if row else None


def text(db: sqlite3.Connection, text_hash: str) -> str | None:
    """A text the loop state refers to (schema 2); None when absent (or the run predates the texts table)."""
    if "texts" not in table_names(db):
        return None
    row = db.execute("SELECT text FROM texts WHERE hash = ?", (text_hash,)).fetchone()
    return str(row["text"]) if row else None


def evaluations(db: sqlite3.Connection, kind: str | None) -> list[EvaluationRow]:
    """In the order written; one kind, or every kind when kind is None."""
    q = "SELECT * FROM evaluations" + (" WHERE kind = ?" if kind else "") + " ORDER BY id"
    return [evaluation_from_row(r) for r in db.execute(q, (kind,) if kind else ())]


def profiles(db: sqlite3.Connection, candidate_id: str | None = None) -> list[ProfileRow]:
    """In the order written; none for a run written before the profiles table existed."""
    if "profiles" not in table_names(db):
        return []
    q = "SELECT * FROM profiles" + (" WHERE candidate_id = ?" if candidate_id else "") + " ORDER BY id"
    return [profile_from_row(r) for r in db.execute(q, (candidate_id,) if candidate_id else ())]


def call_count(db: sqlite3.Connection) -> int:
    return int(db.execute("SELECT COUNT(*) FROM calls").fetchone()[0])


def calls(db: sqlite3.Connection, texts: bool) -> list[CallRow]:
    """texts=False leaves out prompt and response (None in the records)."""
    cols = "*" if texts else _CALL_FIGURES
    return [call_from_row(r) for r in db.execute(f"SELECT {cols} FROM calls ORDER BY id")]


def events(db: sqlite3.Connection, kind: str | None) -> list[EventRow]:
    q = "SELECT * FROM events" + (" WHERE kind = ?" if kind else "") + " ORDER BY id"
    return [event_from_row(r) for r in db.execute(q, (kind,) if kind else ())]


def world_models(db: sqlite3.Connection) -> list[WorldModelRow]:
    return [world_model_from_row(r) for r in db.execute("SELECT * FROM world_models ORDER BY id")]


def latest_world_model(db: sqlite3.Connection) -> WorldModelRow | None:
    r = db.execute("SELECT * FROM world_models ORDER BY id DESC LIMIT 1").fetchone()
    return world_model_from_row(r) if r is not None else None
