"""Runs on disk: SQLite + files under runs/<run-id>/."""

from ksearch.store.db import CandidateRow, RunNotFound, RunStore, list_runs, new_run_id, resolve_run, runs_dir

__all__ = ["CandidateRow", "RunNotFound", "RunStore", "list_runs", "new_run_id", "resolve_run", "runs_dir"]
