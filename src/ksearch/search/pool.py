"""Evaluators behind one interface: a pool takes candidates (jobs), judges each on one of its workers, and hands
back verdicts in the order they arrive. The search driver (search/parallel.py) owns the run store; a pool never
writes to it.

- `InlinePool`: judges in this process with one evaluate function, a job at a time, in the order given (the
  single-process evaluator behind a pool's interface: a parallel run resumed with one worker, and tests).
- `search/ray_pool.py: RayPool`: one Ray actor per worker, each with its own Evaluator on its own device, on this
  machine or on a cluster.
"""

from __future__ import annotations

import socket
import time
from collections import deque
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any, Protocol

from ksearch.harness.result import EvalResult


@dataclass
class Job:
    """A candidate on its way to an evaluator."""

    candidate: str
    source: str
    #: The device kind whose verdict it needs (a cycle's candidates are compared on one kind); None: any.
    kind: str | None = None


@dataclass
class WorkerInfo:
    id: str
    device_kind: str
    host: str = ""
    pid: int | None = None
    state: str = "idle"  # idle | busy | restarting | dead
    candidate: str | None = None  # the job it is judging
    evaluations: int = 0
    lost: int = 0  # jobs it died with
    busy_s: float = 0.0

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class Arrival:
    """A job's end: its verdict, or (result None) the evaluator died with it and the job must be judged again."""

    job: Job
    worker: WorkerInfo
    result: EvalResult | None
    started_at: float
    ended_at: float
    error: str = ""

    def placement(self) -> dict[str, Any]:
        """Where and when it was judged, as every verdict from a pool records it (result.environment.evaluator)."""
        return {"worker": self.worker.id, "host": self.worker.host, "pid": self.worker.pid,
                "device_kind": self.worker.device_kind, "started_at": self.started_at, "ended_at": self.ended_at}


class EvaluatorPool(Protocol):
    def workers(self) -> list[WorkerInfo]: ...

    def idle_kinds(self) -> list[str]:
        """The device kind of every idle worker (one entry each)."""
        ...

    def submit(self, job: Job) -> WorkerInfo | None:
        """Start judging `job` on an idle worker of its kind; None when there is none."""
        ...

    def busy(self) -> int: ...

    def wait(self) -> Arrival:
        """Block until a job ends (judged, or lost with its evaluator)."""
        ...

    def close(self) -> None: ...


def device_kind(environment: dict[str, Any]) -> str:
    """What a verdict's speedups are relative to: the backend and the device that timed candidate and baseline."""
    return f"{environment.get('backend', '?')}:{environment.get('device', '?')}"


@dataclass
class InlinePool:
    """`workers` slots judged in this process, one job at a time in the order they were submitted: the parallel
    search's bookkeeping without concurrency (deterministic)."""

    evaluate: Callable[[str], EvalResult]
    size: int = 1
    kind: str = "local"
    _queue: deque[tuple[Job, WorkerInfo]] = field(default_factory=deque)
    _workers: list[WorkerInfo] = field(default_factory=list)

    def __post_init__(self) -> None:
        host = socket.gethostname()
        self._workers = [WorkerInfo(f"w{i + 1}", self.kind, host) for i in range(self.size)]

    def workers(self) -> list[WorkerInfo]:
        return list(self._workers)

    def idle_kinds(self) -> list[str]:
        return [w.device_kind for w in self._workers if w.state == "idle"]

    def submit(self, job: Job) -> WorkerInfo | None:
        for w in self._workers:
            if w.state == "idle" and job.kind in (None, w.device_kind):
                w.state, w.candidate = "busy", job.candidate
                self._queue.append((job, w))
                return w
        return None

    def busy(self) -> int:
        return len(self._queue)

    def wait(self) -> Arrival:
        job, w = self._queue.popleft()
        t0 = time.time()
        result = self.evaluate(job.source)
        t1 = time.time()
        w.state, w.candidate = "idle", None
        w.evaluations += 1
        w.busy_s += t1 - t0
        return Arrival(job, w, result, t0, t1)

    def close(self) -> None:
        self._queue.clear()
