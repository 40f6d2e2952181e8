"""Runs on disk: SQLite + files under runs/<run-id>/. The only module that opens run.db.

Writing (the search process): RunStore. Reading (every other process, read-only): read_run, RunReader, list_runs.
"""

from ksearch.store.db import RunStore
from ksearch.store.paths import (
    RunNotFound,
    folder_problem,
    new_run_id,
    resolve_run,
    runs_dir,
    runs_dir_problem,
)
from ksearch.store.read import RunReader, RunRecords, RunUnreadable, list_runs, read_run
from ksearch.store.records import CallRow, CandidateRow, EvaluationRow, EventRow, RunMeta, WorldModelRow

__all__ = [
    "CallRow", "CandidateRow", "EvaluationRow", "EventRow", "RunMeta", "RunNotFound", "RunReader", "RunRecords",
    "RunStore", "RunUnreadable", "WorldModelRow", "folder_problem", "list_runs", "new_run_id",
    "read_run", "resolve_run", "runs_dir", "runs_dir_problem",
]
