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
