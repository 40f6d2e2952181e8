"""Where runs live: the runs directory, new run ids, finding a run by id or path, and whether a folder can take new
files (the runs directory, a command's output)."""

from __future__ import annotations

import os
import tempfile
import time
import uuid
from pathlib import Path

from ksearch.errors import RunError, RunNotFound
from ksearch.tasks.base import name_problem


def new_run_id(task: str) -> str:
    """A new run's id, the name of its directory under the runs directory: time, task name, random suffix. A task
    name that could not stand in a directory's name (a path separator, "..", too long) is refused: the run would
    land elsewhere, or nowhere."""
    if (problem := name_problem(task)) is not None:
        raise RunError(f"task {task[:72]!r} {problem}")
    return f"{time.strftime('%Y%m%d-%H%M%S')}-{task}-{uuid.uuid4().hex[:6]}"


def runs_dir(explicit: str | Path | None = None) -> Path:
    return Path(explicit or os.environ.get("KSEARCH_RUNS_DIR") or "runs")


def runs_dir_problem(explicit: str | Path | None = None) -> str | None:
    """Why runs cannot be looked up in the runs directory, as a sentence (None: they can). The default folder not
    made yet is no problem (there are no runs yet); a folder named by --runs-dir or KSEARCH_RUNS_DIR that is not
    there is, as it is most likely mistyped."""
    root = runs_dir(explicit)
    if root.is_dir():
        return None
    if root.exists():
        return f"the runs directory {root} is a file, not a directory; pass --runs-dir where runs are"
    if explicit or os.environ.get("KSEARCH_RUNS_DIR"):
        return f"no runs folder at {root}; pass --runs-dir where runs are"
    return None


def resolve_run(ref: str | Path, base: str | Path | None = None) -> Path:
    """A run id (looked up under the runs directory) or a path to a run directory."""
    p = Path(ref)
    for cand in (p, runs_dir(base) / str(ref)):
        if (cand / "run.db").is_file():
            return cand
    problem = runs_dir_problem(base)
    raise RunNotFound(f"no run {ref!r}: not a run directory, and " + (
        problem or f"not found under {runs_dir(base)}/ (see `ksearch runs`, or pass --runs-dir)"))


def folder_problem(folder: str | Path) -> str | None:
    """Why `folder` cannot take new files, made here if missing (None: it can), as the end of a sentence naming it."""
    path = Path(folder)
    if path.exists() and not path.is_dir():
        return "is a file, not a directory"
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        return f"cannot be made ({exc.strerror})"
    # A file made and removed: os.access says yes to root on a read-only mount or /proc, where writing fails.
    try:
        fd, probe = tempfile.mkstemp(dir=path, prefix=".ksearch-write-check-")
    except OSError:
        return "is not writable"
    os.close(fd)
    os.unlink(probe)
    return None
