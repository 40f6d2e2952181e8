"""Where runs live: the runs directory, new run ids, and finding a run by id or path."""

from __future__ import annotations

import os
import time
import uuid
from pathlib import Path

from ksearch.errors import RunNotFound


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
