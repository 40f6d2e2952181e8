"""harness/timing.py: combine() turns the worker's per-call times into a latency."""

from __future__ import annotations

import random

import pytest

from ksearch.harness import timing


def _batches(times: list[float], per_batch: int = 20) -> list[tuple[float, int, list[float]]]:
    chunks = [times[i:i + per_batch] for i in range(0, len(times), per_batch)]
    return [(sum(c), len(c), c) for c in chunks]  # the parent's clock agrees with the worker's


def test_an_honest_kernel_with_outliers_is_timed_by_its_median() -> None:
    rng = random.Random(1)
    times = [1e-3 * rng.uniform(0.95, 1.05) for _ in range(180)] + [1e-2] * 20  # 10% of calls at 10x
    rng.shuffle(times)
    measured = timing.combine(_batches(times))
    assert measured.error is None and measured.source == "worker"
    assert measured.latency_s == pytest.approx(1e-3, rel=0.06)


def test_calls_of_two_kinds_are_timed_by_their_mean() -> None:
    # Two calls in three served from a cache, one computed: with the median the candidate would keep the cache's
    # speed whenever the checked calls fell on computed ones; with the mean it gains about 3x, no more.
    times = [1e-5, 1e-5, 1e-3] * 60
    measured = timing.combine(_batches(times))
    assert measured.error is None and measured.source == "mean"
    assert measured.latency_s == pytest.approx((2e-5 + 1e-3) / 3, rel=1e-6)
    assert 1e-3 / measured.latency_s < 3.01


class _Worker:
    """Enough of a worker for time_workload: `prepare` and `release` answer ok (batches and checks are faked)."""

    def request(self, msg: dict, deadline: float, max_bytes: int | None = None) -> tuple[dict, dict]:
        return {"ok": True}, {}


@pytest.mark.parametrize("kinds", [1, 2])
def test_calls_of_two_kinds_get_more_checks(monkeypatch: pytest.MonkeyPatch, kinds: int) -> None:
    from ksearch.harness import measure
    from ksearch.harness.batch import Batch
    from ksearch.tasks import get_task

    def fake_batch(worker: object, first: int, n_max: int, key: int, deadline: float, stop_at: object,
                   run: int = 1) -> Batch:
        n = min(n_max, 12)
        # One kind: every call 1 ms. Two kinds: two calls in three 10 us (served from a cache), one 1 ms.
        times = [1e-3 if kinds == 1 or (first + k) % 3 == 0 else 1e-5 for k in range(n)]
        return Batch(first, key, sum(times), {"ok": True, "times": times, "gaps": [0.0] * n, "lead": 0.0},
                     ["0" * 16] * n, n)

    checks: list[int] = []
    monkeypatch.setattr(measure, "run_batch", fake_batch)
    monkeypatch.setattr(measure, "_take_check", lambda *a, **k: checks.append(1) or True)
    task = get_task("softmax")
    w = task.select_workloads("cpu")[0]
    plan = timing.TimingPlan(pool_sets=3, warmup=2, warmup_s=0.0, batches=5, target_batch_s=0.01, checks=2)
    timed = measure.time_workload(_Worker(), task, w, plan, deadline=1e12, check=True,  # type: ignore[arg-type]
                                  rng=random.SystemRandom())
    assert len(checks) == plan.checks + (timing.BIMODAL_CHECKS if kinds == 2 else 0)
    assert len(timed.batches) == plan.batches + (timing.BIMODAL_CHECKS if kinds == 2 else 0)


def test_a_probe_batch_shows_calls_of_two_kinds_that_queued_runs_average_away(monkeypatch: pytest.MonkeyPatch) -> None:
    # Two calls in three skipped: in a queued run every call reports the run's mean, so only the probe batch (one
    # call a run, chosen by the parent) shows the two kinds; it alone feeds the test, and the latency ignores it.
    from ksearch.harness import measure
    from ksearch.harness.batch import Batch
    from ksearch.tasks import get_task

    asked: list[int] = []

    def fake_batch(worker: object, first: int, n_max: int, key: int, deadline: float, stop_at: object,
                   run: int = 1) -> Batch:
        asked.append(run)
        n = min(n_max, 12)
        calls = [1e-3 if (first + k) % 3 == 0 else 1e-5 for k in range(n)]
        times = calls if run == 1 else [sum(calls) / n] * n
        return Batch(first, key, sum(times), {"ok": True, "times": times, "gaps": [0.0] * n, "lead": 0.0,
                                              "runs": [1] * n if run == 1 else [n]}, ["0" * 16] * n, n)

    checks: list[int] = []
    monkeypatch.setattr(measure, "run_batch", fake_batch)
    monkeypatch.setattr(measure, "_take_check", lambda *a, **k: checks.append(1) or True)
    task = get_task("softmax")
    w = task.select_workloads("cpu")[0]
    plan = timing.TimingPlan(pool_sets=12, warmup=2, warmup_s=0.0, batches=5, target_batch_s=0.01, checks=2, run=6)
    timed = measure.time_workload(_Worker(), task, w, plan, deadline=1e12, check=True,  # type: ignore[arg-type]
                                  rng=random.SystemRandom())
    assert len(checks) == plan.checks + timing.BIMODAL_CHECKS
    assert sum(b.probe for b in timed.batches) == timing.PROBE_BATCHES
    assert all(len(set(b.times)) == 1 for b in timed.timed())  # the latency's batches are the queued ones
    # Unchecked timing (a trusted baseline) has no probe.
    asked.clear()
    measure.time_workload(_Worker(), task, w, plan, deadline=1e12, check=False,  # type: ignore[arg-type]
                          rng=random.SystemRandom())
    assert 1 not in asked[-plan.batches:]


def test_a_probe_batch_whose_times_disagree_with_the_parents_clock_is_an_error() -> None:
    # A probe is left out of the latency, not out of the clock check.
    from ksearch.harness.batch import Batch
    from ksearch.harness.measure import Timed

    honest = Batch(0, 1, 0.012, {"ok": True, "times": [1e-3] * 12, "gaps": [0.0] * 12, "lead": 0.0}, probe=True)
    forged = Batch(12, 2, 0.012, {"ok": True, "times": [1e-4] * 12, "gaps": [0.0] * 12, "lead": 0.0}, probe=True)
    assert Timed(batches=[honest]).probe_error() is None
    assert Timed(batches=[honest, forged]).probe_error()
    assert Timed(batches=[Batch(0, 1, 0.012, forged.reply)]).probe_error() is None  # not a probe: combine's to judge


def test_the_time_between_calls_comes_from_the_batches_the_latency_comes_from() -> None:
    # A probe runs one call a run, so all of the harness's work between runs falls on each of its calls: its gaps
    # per call are not comparable with queued runs' and stay out of the median gap, as out of the latency.
    from ksearch.harness.batch import Batch
    from ksearch.harness.measure import Timed

    queued = Batch(0, 1, 0.01, {"times": [1e-4] * 12, "gaps": ([0.0] * 5 + [6e-4]) * 2, "runs": [6, 6]})
    probe = Batch(12, 2, 0.01, {"times": [1e-4] * 12, "gaps": [6e-4] * 12, "runs": [1] * 12}, probe=True)
    timed = Timed(batches=[queued, probe, probe])
    assert timed.median_gap() == pytest.approx(1e-4)
