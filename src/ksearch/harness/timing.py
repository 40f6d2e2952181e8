"""Timing rules: pool sizes that defeat caches, batch sizes, the parent-clock cross-check and the physical floor."""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass
from typing import Any

from ksearch.tasks.base import Task, Workload


@dataclass
class TimingPlan:
    pool_sets: int
    warmup: int
    batches: int
    target_batch_s: float


def plan(task: Task, workload: Workload, llc_bytes: int, gpu: bool, max_pool_bytes: int = 8 << 30) -> TimingPlan:
    per_set = max(1, task.input_bytes(workload) + task.output_bytes(workload))
    # More distinct input sets than twice the last-level cache holds: every timed call reads from DRAM.
    sets = math.ceil(2 * llc_bytes / per_set) + 1
    sets = max(2, min(sets, 64, max(2, max_pool_bytes // per_set)))
    return TimingPlan(pool_sets=sets, warmup=3, batches=5 if gpu else 3, target_batch_s=0.1 if gpu else 0.15)


def batch_size(estimate_s: float, target_s: float) -> int:
    if not (estimate_s > 0 and math.isfinite(estimate_s)):
        return 10
    return max(1, min(2000, round(target_s / estimate_s)))


@dataclass
class Measured:
    latency_s: float
    spread: float
    source: str  # worker | parent
    error: str | None = None


def combine(batches: list[tuple[float, int, list[float]]]) -> Measured:
    """batches: (parent elapsed seconds, calls, worker per-call times). The worker's times are finer but are only
    believed when they fit inside the parent's clock; a worker that claims more time than passed, or far less, is
    lying (a patched timer) and the evaluation fails."""
    all_worker: list[float] = []
    parent_means = []
    for elapsed, n, times in batches:
        parent_means.append(elapsed / n)
        if len(times) != n or any(not (isinstance(t, (int, float)) and math.isfinite(t) and t >= 0) for t in times):
            return Measured(elapsed / n, 0.0, "parent", "the worker reported malformed timings")
        total = sum(times)
        if total > elapsed * 1.05 + 2e-3:
            return Measured(elapsed / n, 0.0, "parent",
                            f"impossible timings: the worker claims {total:.4g}s inside {elapsed:.4g}s of wall clock")
        if total < elapsed * 0.35 - 5e-3:
            return Measured(elapsed / n, 0.0, "parent",
                            f"inconsistent timings: the worker claims {total:.4g}s of {elapsed:.4g}s of wall clock "
                            "(was a timer patched?)")
        all_worker.extend(times)
    med = statistics.median(all_worker)
    q = statistics.quantiles(all_worker, n=4) if len(all_worker) >= 4 else [med, med, med]
    return Measured(med, (q[2] - q[0]) / med if med > 0 else 0.0, "worker")


def floor_seconds(task: Task, workload: Workload, profile: dict[str, Any]) -> float | None:
    """The physical lower bound on one call: bytes / peak bandwidth, or flops / peak rate, whichever is larger."""
    bw = profile.get("bandwidth_gbs")
    peaks = profile.get("peak_tflops") or {}
    bounds = []
    if bw:
        bounds.append(task.bytes_moved(workload) / (bw * 1e9))
    peak = peaks.get(workload.dtype)
    if peak:
        bounds.append(task.flops(workload) / (peak * 1e12))
    return max(bounds) if bounds else None
