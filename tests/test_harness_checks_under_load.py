"""A timed call is still checked when a loaded machine delays the worker's commitments past the parent's stops, and
an evaluation whose commitments never arrive in time fails rather than passing unchecked (measure.time_workload)."""

from __future__ import annotations

import time
from typing import Any

import numpy as np
import pytest

from ksearch.harness import measure, timing
from ksearch.harness.batch import Batch
from ksearch.harness.digest import fingerprint_numpy
from ksearch.tasks import get_task

OUT = np.arange(8, dtype=np.float32)
COMMIT = fingerprint_numpy([OUT])


class Worker:
    """The parent's view of a worker: every request answered; a named call's outputs are OUT, committed to as COMMIT."""

    def request(self, msg: dict[str, Any], deadline: float, max_bytes: int | None = None) -> Any:
        if msg["op"] == "spot":
            return {"ok": True, "dtypes": ["float32"]}, {"out0": OUT}
        return {"ok": True}, {}


def _batches(late: int, monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """Timed batches whose commitments all arrive after the stop, for the first `late` stopped batches; returns how
    far ahead each stop was set, in seconds."""
    ahead: list[float] = []

    def run_batch(worker: Any, first: int, n_max: int, key: int, deadline: float, stop_at: float | None,
                  run: int = 1) -> Batch:
        times = [1e-3] * min(n_max, 4)
        b = Batch(first=first, batch_key=key, elapsed=sum(times) + 1e-4, commits=[COMMIT] * len(times),
                  reply={"ok": True, "times": times, "gaps": [0.0] * len(times), "lead": 0.0})
        b.before_stop = len(times)
        if stop_at is not None:
            ahead.append(stop_at - time.monotonic())
            if len(ahead) <= late:
                b.before_stop = 0
        return b

    monkeypatch.setattr(measure, "run_batch", run_batch)
    return ahead


def _time(check: bool = True) -> measure.Timed:
    task = get_task("softmax")
    w = task.select_workloads("cpu")[0]
    plan = timing.plan(task, w, 32 << 20, gpu=False)
    return measure.time_workload(Worker(), task, w, plan, time.monotonic() + 60, check=check)  # type: ignore[arg-type]


def test_checks_survive_commitments_that_miss_several_stops_in_a_row(monkeypatch: pytest.MonkeyPatch) -> None:
    ahead = _batches(late=6, monkeypatch=monkeypatch)
    timed = _time()
    assert len(timed.checks) == 2
    # After a miss the stops fall later (half to one and a half times the expected 4 ms) than the first ones may.
    assert min(ahead[6:]) >= 0.5 * 4e-3 * 0.9


def test_commitments_that_never_arrive_in_time_fail_the_evaluation(monkeypatch: pytest.MonkeyPatch) -> None:
    _batches(late=10_000, monkeypatch=monkeypatch)
    with pytest.raises(measure.Fail, match="no timed call could be checked"):
        _time()
