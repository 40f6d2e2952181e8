"""Reading a run that this process does not own: `report`, `export`, `watch`, `compare`, `runs`, scripts.

The database is opened read-only (SQLite `mode=ro`), so a reader can never take a write lock, create a table or
switch the journal mode of a run the search process may be writing at that moment. The search process writes in
WAL mode, so readers see the last committed state and never block it; `read_run` takes everything in one read
transaction, so the tables it returns agree with each other.

    records = read_run(path)            # everything at once (what a report needs)
    with RunReader(path) as run:        # or one table at a time
        evals = run.evaluations(kind=None)
"""

from __future__ import annotations

import contextlib
import sqlite3
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any, TypeVar

from ksearch.errors import RunNotFound, RunUnreadable
from ksearch.store import queries
from ksearch.store.paths import runs_dir
from ksearch.store.records import (
    CallRow,
    CandidateRow,
    EvaluationRow,
    EventRow,
    ProfileRow,
    RunMeta,
    WorldModelRow,
)
from ksearch.store.schema import SCHEMA_VERSION, TABLES

T = TypeVar("T")


@dataclass(frozen=True)
class RunRecords:
    """A whole run as committed at one moment."""

    path: Path
    meta: RunMeta
    candidates: list[CandidateRow]
    evaluations: list[EvaluationRow]  # every kind, in the order written
    world_models: list[WorldModelRow]  # every snapshot, oldest first
    calls: list[CallRow]  # without prompt and response
    events: list[EventRow]
    profiles: list[ProfileRow] = field(default_factory=list)  # one per profiled candidate, in the order written

    def evaluations_of(self, kind: str) -> list[EvaluationRow]:
        return [e for e in self.evaluations if e.kind == kind]


class RunReader:
    """A run's database opened read-only. Every method reads the committed state at the moment it is called.

    Raises RunNotFound when the directory has no run.db, RunUnreadable when it is not a ksearch run database, is
    corrupt, or was written by a newer ksearch. SQLITE_BUSY (a writer checkpointing the WAL) is retried briefly.
    """

    def __init__(self, run_dir: str | Path, retries: int = 3) -> None:
        self.path = Path(run_dir)
        self.retries = max(1, retries)
        db_file = self.path / "run.db"
        if not db_file.is_file():
            raise RunNotFound(f"{self.path} is not a run directory (no run.db)")
        self._db = sqlite3.connect(f"{db_file.resolve().as_uri()}?mode=ro", uri=True, timeout=10)
        self._db.row_factory = sqlite3.Row
        try:
            self._read(self._check)
        except BaseException:
            self._db.close()
            raise

    def __enter__(self) -> RunReader:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()

    def close(self) -> None:
        self._db.close()

    # -- tables -------------------------------------------------------------------------------------------------
    def meta(self) -> RunMeta:
        return self._read(queries.meta)

    def candidates(self) -> list[CandidateRow]:
        return self._read(queries.candidates)

    def evaluations(self, kind: str | None = "search") -> list[EvaluationRow]:
        """One kind (search, holdout, baseline), or every kind with kind=None; in the order written."""
        return self._read(lambda db: queries.evaluations(db, kind))

    def calls(self, texts: bool = False) -> list[CallRow]:
        """The LLM calls; their prompts and responses only with texts=True."""
        return self._read(lambda db: queries.calls(db, texts))

    def events(self, kind: str | None = None) -> list[EventRow]:
        return self._read(lambda db: queries.events(db, kind))

    def world_models(self) -> list[WorldModelRow]:
        return self._read(queries.world_models)

    def profiles(self) -> list[ProfileRow]:
        return self._read(queries.profiles)

    def records(self) -> RunRecords:
        """Every table, from one read transaction."""
        def everything(db: sqlite3.Connection) -> RunRecords:
            db.execute("BEGIN")  # one snapshot of the WAL for every table; _read rolls it back on an error
            recs = RunRecords(self.path, queries.meta(db), queries.candidates(db), queries.evaluations(db, None),
                              queries.world_models(db), queries.calls(db, False), queries.events(db, None),
                              queries.profiles(db))
            db.execute("COMMIT")
            return recs

        return self._read(everything)

    # -- plumbing -------------------------------------------------------------------------------------------------
    def _check(self, db: sqlite3.Connection) -> None:
        tables = queries.table_names(db)
        if "meta" not in tables:
            raise RunUnreadable(f"cannot read {self.path}/run.db: not a ksearch run database (it has no meta table)")
        missing = [t for t in TABLES if t not in tables]
        if missing:
            raise RunUnreadable(f"cannot read {self.path}/run.db: not a complete ksearch run database "
                                f"(no table {', '.join(missing)})")
        version = queries.meta(db).schema_version
        if version is not None and version > SCHEMA_VERSION:
            raise RunUnreadable(f"cannot read {self.path}/run.db: it was written by a newer ksearch (schema "
                                f"{version}; this one reads up to {SCHEMA_VERSION}): upgrade ksearch to read it")

    def _end_transaction(self) -> None:
        if self._db.in_transaction:
            # If the rollback fails too, the error that brought us here is still the one to report.
            with contextlib.suppress(sqlite3.Error):
                self._db.rollback()

    def _read(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        for attempt in range(self.retries):
            try:
                return fn(self._db)
            except sqlite3.DatabaseError as exc:
                self._end_transaction()
                # Busy or locked (a writer checkpointing the WAL) is worth a second look; not a database or
                # malformed is not.
                if not isinstance(exc, sqlite3.OperationalError) or attempt == self.retries - 1:
                    raise RunUnreadable(f"cannot read {self.path}/run.db: {exc}") from exc
                time.sleep(0.2 * (attempt + 1))
            except BaseException:
                self._end_transaction()
                raise
        raise AssertionError("unreachable")


def read_run(run_dir: str | Path, retries: int = 3) -> RunRecords:
    """A whole run, read once and consistently (see RunReader for the errors)."""
    with RunReader(run_dir, retries=retries) as reader:
        return reader.records()


#: What `ksearch runs` shows of each run (meta keys; `status` as shown: `interrupted` for a run whose process is gone).
LISTED = ("task", "backend", "policy", "strategy", "budget", "evaluations_done", "best_score", "best_candidate",
          "chosen_candidate", "status", "created_at", "stop_kind", "stop_reason", "llm_usage", "holdout",
          "confirmation")


def list_runs(base: str | Path | None = None) -> list[dict[str, Any]]:
    """The runs under the runs directory, by name, with their listed meta. A run whose run.db cannot be read is
    listed too, with only `id`, `path` and `unreadable` (why, without the path the row already names)."""
    out: list[dict[str, Any]] = []
    root = runs_dir(base)
    if not root.is_dir():
        return out
    for d in sorted(root.iterdir()):
        if not (d / "run.db").is_file():
            continue
        try:
            with RunReader(d) as reader:
                m = reader.meta()
        except RunNotFound:  # removed since the look above
            continue
        except RunUnreadable as exc:
            why = str(exc).removeprefix(f"cannot read {d}/run.db: ")
            out.append({"id": d.name, "path": str(d), "unreadable": why})
            continue
        shown = {"status": m.shown_status, "stop_kind": m.stop_kind, "stop_reason": m.stop_reason,
                 "llm_usage": m.llm_usage}
        out.append({"id": d.name, "path": str(d), **{k: shown[k] if k in shown else m.get(k) for k in LISTED}})
    return out
