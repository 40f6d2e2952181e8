"""Which process owns a run, and whether it is still there.

The search process writes its owner into the run's meta when it starts or resumes the search (`owner`: pid, host,
the process's start time). A run whose status still says `running` (or `holdout`) but whose owner is gone was
killed without a word (SIGKILL, a crash of the machine, an OOM kill): readers show it as `interrupted`, and
`--resume` continues it. The start time guards against a recycled pid: a live process with the same pid but a
different start time is not the owner.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Mapping
from typing import Any, Literal

import psutil

#: The statuses a run has while its search process works on it.
ACTIVE = ("running", "holdout")

Liveness = Literal["alive", "gone", "unknown"]


def current_owner() -> dict[str, Any]:
    """This process, as a run's meta records its owner."""
    return {"pid": os.getpid(), "host": socket.gethostname(), "started": psutil.Process().create_time()}


def owner_liveness(owner: Any, pid: Any = None, host: Any = None) -> Liveness:
    """Whether the process that owns a run is alive. `owner` is the meta's `owner` record; `pid` / `host` are the
    bare keys runs written before it had (no start time: a live process with that pid counts as the owner).
    "unknown": the owner ran on another host, or nothing says who it is."""
    if isinstance(owner, Mapping):
        pid, host, started = owner.get("pid"), owner.get("host"), owner.get("started")
    else:
        started = None
    if not isinstance(pid, int) or isinstance(pid, bool) or pid <= 0:
        return "unknown"
    if host is not None and host != socket.gethostname():
        return "unknown"
    try:
        proc = psutil.Process(pid)
        if proc.status() == psutil.STATUS_ZOMBIE:
            return "gone"  # killed, waiting for its parent to collect it: it writes nothing more
        if isinstance(started, int | float) and abs(proc.create_time() - float(started)) > 0.5:
            return "gone"  # the pid was reused by a later process
    except psutil.NoSuchProcess:
        return "gone"
    except psutil.AccessDenied:
        return "alive"  # it exists; another user's process
    return "alive"


def effective_status(meta: Mapping[str, Any]) -> str:
    """The status to show: the stored one, except `interrupted` for an active run whose owner is gone."""
    status = str(meta.get("status") or "unknown")
    if status in ACTIVE and owner_liveness(meta.get("owner"), meta.get("pid"), meta.get("host")) == "gone":
        return "interrupted"
    return status


def interrupted_reason(meta: Mapping[str, Any]) -> str:
    owner = meta.get("owner") if isinstance(meta.get("owner"), Mapping) else {}
    pid = owner.get("pid", meta.get("pid"))  # type: ignore[union-attr]
    return (f"its search process{f' (pid {pid})' if pid else ''} ended without a word (killed, or the machine went "
            "down); --resume continues it")
