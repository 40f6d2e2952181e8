"""Where runs live: the runs directory, new run ids, finding a run by id or path, and whether a folder can take new
files (the runs directory, a command's output)."""

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


def folder_problem(folder: str | Path) -> str | None:
    """Why `folder` cannot take new files, made here if missing (None: it can), as the end of a sentence naming it."""
    path = Path(folder)
    if path.exists() and not path.is_dir():
        return "is a file, not a directory"
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        return f"cannot be made ({exc.strerror})"
    if not os.access(path, os.W_OK):
        return "is not writable"
    return None
