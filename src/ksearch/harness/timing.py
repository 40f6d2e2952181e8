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


#: Timed calls read their pool set rotated by a multiple of SHIFT_BYTES (an alignment that vector loads keep), in
#: SHIFTS different ways: no two calls among pool_sets * SHIFTS see the same contents or addresses.
SHIFT_BYTES = 256
#: Warm-up calls a worker may make; timed calls start past them, so no timed call sees a warm-up call's inputs.
WARMUP_MAX_CALLS = 100
SHIFTS = 256
#: The worker keeps the outputs of its last RING timed calls; after SPOT_CHECKS randomly chosen batches of each
#: candidate timing, the parent judges one of them against the reference for that call's (rotated) inputs. The
#: parent ends each batch at a moment the worker cannot foresee, so a candidate that skips the work whenever it
#: recognises a timed call (by its caller's frames, a counter, the pace of calls) is caught.
RING = 3
SPOT_CHECKS = 2

#: The first timed batch is at most this many calls: the worker's warm-up estimate (which a patched clock can make
#: absurdly small) must not be able to size a batch of minutes; later batches are sized from the parent's clock.
FIRST_BATCH_MAX = 20

#: The worker's summed per-call times must cover at least this share of the parent's wall clock for a batch. Honest
#: workers measure 0.98-0.995 of it (the rest is messaging); the share bounds what a clock that runs slow can win.
#: It was 0.35, which let a clock running at 0.4x real speed pass with a 2.5x speedup.
MIN_COVERAGE = 0.7


def batch_error(elapsed: float, n: int, times: list[float]) -> str | None:
    """Why the worker's times for one batch of at most n calls (the parent may stop it early) cannot be believed."""
    if not 1 <= len(times) <= n or any(not (isinstance(t, (int, float)) and math.isfinite(t) and t >= 0) for t in times):
        return "the worker reported malformed timings"
    total = sum(times)
    if total > elapsed * 1.05 + 2e-3:
        return f"impossible timings: the worker claims {total:.4g}s inside {elapsed:.4g}s of wall clock"
    if total < elapsed * MIN_COVERAGE - 5e-3:
        return (f"inconsistent timings: the worker claims {total:.4g}s of {elapsed:.4g}s of wall clock "
                "(was a timer patched?)")
    return None


def combine(batches: list[tuple[float, int, list[float]]]) -> Measured:
    """batches: (parent elapsed seconds, calls, worker per-call times). The worker's times are finer but are only
    believed when they fit inside the parent's clock; a worker that claims more time than passed, or far less, is
    lying (a patched timer) and the evaluation fails."""
    all_worker: list[float] = []
    for elapsed, _n, times in batches:
        n = len(times) or 1
        error = batch_error(elapsed, n, times)
        if error:
            return Measured(elapsed / n, 0.0, "parent", error)
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
