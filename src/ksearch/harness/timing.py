"""Timing rules: pool sizes that defeat caches, batch sizes, the parent-clock cross-check and the physical floor."""

from __future__ import annotations

import math
import os
import statistics
from dataclasses import dataclass
from typing import Any

from ksearch.errors import ConfigError
from ksearch.tasks.base import Task, Workload


@dataclass
class TimingPlan:
    pool_sets: int
    warmup: int  # calls at least
    warmup_s: float  # and seconds at least
    batches: int
    target_batch_s: float
    checks: int  # batches whose checked call is judged against the reference
    run: int = 1  # timed calls at most per run (see RUN)
    run_span_s: float = 0.16  # seconds that RUNS_PER_BATCH runs may take before runs are shortened (run_for)
    #: Seconds the warm-up may go on, after its first batch, for its calls to settle (measure.time_workload): the
    #: slow warm-ups it absorbs were seen on the H200. None on the CPU, whose small calls rarely settle within 15%: a
    #: limit of 0.1 s there made `make test` 100 s longer.
    settle_s: float = 0.3
    #: Whether the warm-up makes a ring's worth of outputs first, so that the timed runs' allocations come from MLX's
    #: cache: on the CPU, whose calls of 7-17 ms made that 0.1-0.2 s a workload, not.
    fill_ring: bool = True


#: A GPU pool holds at least this many sets where its limit allows (pool_bytes), so that runs are this long (RUN).
MIN_GPU_SETS = 24
#: The least a GPU pool holds where memory allows when KSEARCH_TIMING_RUN sets shorter runs.
_MIN_GPU_SETS_SHORT = 4
#: Calls per run on the CPU, at most. A CPU call is rarely bound by its dispatch, so queuing gains little there, and
#: every timed batch holds four whole runs (batch_floor): with runs of six, the softmax starter's later evaluations
#: on the 2-core CPU took 3.3-4.5 s instead of 2.0-2.5 s. The CPU's runs also shorten sooner (run_span_s: a batch
#: target, not two): with runs of two for its 12 ms calls, they took 2.2-3.1 s.
CPU_RUN = 2


#: A timing pool's bytes at most (each worker's): 8 GiB, and a sixteenth of the device's memory (pool_bytes).
MAX_POOL_BYTES = 8 << 30


def pool_bytes(memory_gb: float | None) -> int:
    """The most a timing pool may hold on a device with `memory_gb` of memory (None: unknown, MAX_POOL_BYTES). The
    candidate's and the baseline's pools, their rings of outputs, the reference worker and the candidate's own arrays
    share the device, and runs of 24 ask pools of 24 sets: on an H200 (141 GB) 8 GiB, on a 24 GB GPU 1.5 GiB, on a
    16 GB Mac 1 GiB."""
    if not memory_gb or not math.isfinite(memory_gb) or memory_gb <= 0:
        return MAX_POOL_BYTES
    return int(min(MAX_POOL_BYTES, memory_gb * (1 << 30) / 16))


def plan(task: Task, workload: Workload, llc_bytes: int, gpu: bool, memory_gb: float | None = None) -> TimingPlan:
    """The timing plan of one workload on a device with `llc_bytes` of last-level cache and `memory_gb` of memory."""
    max_pool_bytes = pool_bytes(memory_gb)
    per_set = max(1, task.input_bytes(workload) + task.output_bytes(workload))
    # More distinct input sets than twice the last-level cache holds: every timed call reads from DRAM.
    sets = math.ceil(2 * llc_bytes / per_set) + 1
    sets = max(2, min(sets, 64, max(2, max_pool_bytes // per_set)))
    if gpu:
        sets = max(sets, min(MIN_GPU_SETS, max_pool_bytes // per_set))
        return TimingPlan(pool_sets=sets, warmup=3, warmup_s=0.1, batches=5, target_batch_s=0.08, checks=2,
                          run=min(sets, RUN), run_span_s=0.16)
    # CPU timings serve relative comparisons within one run: a pool of at most 8 sets (building 64 took longer than
    # the rest of the timing of a small workload), shorter batches, and short runs (CPU_RUN).
    sets = min(sets, 8)
    return TimingPlan(pool_sets=sets, warmup=3, warmup_s=0.05, batches=4, target_batch_s=0.06, checks=2,
                      run=min(sets, CPU_RUN), run_span_s=0.06, settle_s=0.0, fill_ring=False)


def run_for(plan: TimingPlan, per_call_s: float) -> int:
    """Calls per run for a workload whose calls take `per_call_s` each (as the worker timed them, after warm-up): the
    plan's run, the candidate's and the baseline's alike, unless RUNS_PER_BATCH runs of it would take over the plan's
    run_span_s; then as many as fit (at least one).

    Run lengths had followed each batch's expected calls (a quarter of them), so a candidate whose calls were
    estimated slow got runs of one (each call synchronised on its own, slower than queued) while its baseline ran
    six, and the time between calls per call of a run, compared between the two by the gap bound, was not alike: an
    honest selective_state_update was timed 3.7x its calls on the H200 (source "cycle"). Runs shorten only
    for calls of milliseconds (over 6.7 ms on a GPU), where a synchronise's host time (250 us at most as measured:
    MLX's attention, gqa_decode B 8) is under 4% of the call and the gap bound's share of the call (GAP_CALL_SHARE)
    is larger than the harness's own work between runs."""
    if not per_call_s > 0 or not math.isfinite(per_call_s):
        return plan.run
    fit = int(plan.run_span_s / (RUNS_PER_BATCH * per_call_s))
    return max(1, min(plan.run, fit))


def batch_floor(run: int) -> int:
    """The fewest calls a timed batch is expected to take: MIN_BATCH_CALLS, and RUNS_PER_BATCH whole runs."""
    return max(MIN_BATCH_CALLS, RUNS_PER_BATCH * run)


def batch_size(estimate_s: float, target_s: float) -> int:
    if not (estimate_s > 0 and math.isfinite(estimate_s)):
        return 10
    return max(1, min(2000, round(target_s / estimate_s)))


@dataclass
class Measured:
    latency_s: float
    spread: float
    source: str  # worker | mean | run | cycle | parent
    error: str | None = None


#: The worker keeps the outputs of its last RING timed calls. The parent stops each batch at a uniformly random moment
#: of its expected length and names one call among the last ones whose commitment had arrived before its stop: every
#: call of a batch is as likely to be the one checked. A batch of runs of `run` calls keeps ring_for(run) of them.
RING = 48
#: A batch's ring, at least: room for commitments that arrive late (a descheduled worker), whatever the run.
RING_MIN = 12


def ring_for(run: int) -> int:
    """The calls a batch asked to run in runs of `run` keeps (and the parent names one among): twice the run, at least
    RING_MIN, at most RING. Twice the run, not RING whatever the run: a ring of 48 outputs of a workload that runs
    only seven a run (pools sized to a small device, pool_bytes) would hold 3 GB of rmsnorm's outputs on a 16 GB Mac."""
    return max(RING_MIN, min(RING, 2 * max(1, run)))

#: The worker times its calls in runs: the inputs of a run's calls are made (stamped) together before its first call,
#: the run's calls follow each other with nothing but the clock between them, and their commitments go out after the
#: run. Device work between two calls (a stamp, a fingerprint) slowed the next call: the worker's loop, taken apart in
#: one process on the H200 (benchmarks/harness_conditions.py --worker-loop), timed 140-250 us calls 1.27-1.59x slower
#: than a plain loop, and 0.87-1.22x with the stamps, fingerprints and ring taken out. With runs, one call in a run
#: follows that work; the latency is the median of all calls. A run uses distinct pool sets (each call's inputs are
#: its own set, stamped anew) and is at most half the ring: the worker ends the run in progress at the parent's stop,
#: and the ring must still hold calls committed to before the stop. Runs of 24 rather than six: what happens between
#: runs costs about the same per run at any length (the fingerprint most: between_runs.py, with runs of 4-6 the next
#: run of a 40-60 us kernel 1.08-1.40x after it, 1.03-1.17x after as long of unrelated device work; with runs of 24
#: 1.02-1.20x, within the noise of such calls), so longer runs share it out. On the H200, native softmax's harness
#: latency was 1.29-1.39x its plain loop's with runs of six and 1.03-1.12x with 24 (fidelity-factor-stamps-TASK-* and
#: fidelity-runs-of-24-TASK-*.json, benchmarks/results/).
RUN = RING // 2


def _int_setting(name: str, most: int, meaning: str, unset: str) -> int | None:
    """The environment's integer setting `name`, 1 to `most`; None where it is unset; a one-line ConfigError
    saying what to give where it is anything else."""
    raw = os.environ.get(name, "").strip()
    if not raw:
        return None
    if not raw.isdigit() or not 1 <= int(raw) <= most:
        raise ConfigError(f"{name}={raw!r}: give {meaning}, 1 to {most} (unset: {unset})")
    return int(raw)


def _run_setting() -> int | None:
    """KSEARCH_TIMING_RUN=N: runs of up to N calls (1 to 32; on the CPU too), a ring of 2N and GPU pools of at least N
    sets where memory allows, instead of RUN (CPU_RUN), RING and MIN_GPU_SETS. For measuring the harness against the
    plain loop at other run lengths (the extra time of a run, taken apart by harness_conditions.py --worker-loop, was
    about the same per run at every run length measured, so longer runs share it out); the parent and its workers
    read the same environment."""
    return _int_setting("KSEARCH_TIMING_RUN", 32, "the most calls a timed run queues",
                        f"{RUN} on a GPU, {CPU_RUN} on the CPU")


#: KSEARCH_TIMING_RUN's value where it is set (every result's environment then records it), else None.
RUN_SETTING = _run_setting()
if RUN_SETTING is not None:
    RUN, RING, MIN_GPU_SETS, CPU_RUN = (RUN_SETTING, 2 * RUN_SETTING, max(_MIN_GPU_SETS_SHORT, RUN_SETTING),
                                        RUN_SETTING)


#: Fresh trusted processes a baseline's timing is taken in by default, the median kept where more than one. Every score
#: of a run divides by this timing, and one process's timing of native gqa_decode at B 16, 32k on the H200 was 15%
#: above the next's (591 and 681 us, the candidates' times unchanged; search-chained-harness-gqa_decode-*.json in
#: benchmarks/results). Three did not narrow the spread between evaluators on the 2-core CPU (1.30-1.74x against
#: 1.42-1.70x over 12 evaluators: slow stretches outlast three processes; baseline-spread-mlx-cpu-*.json), and on the
#: GPU it is not measured yet (benchmarks/baseline_spread.py), so one stays the default.
BASELINE_PROCESSES = 1


def _baseline_processes_setting() -> int | None:
    """KSEARCH_BASELINE_PROCESSES=N (1 to 9): that many processes for every baseline timing."""
    return _int_setting("KSEARCH_BASELINE_PROCESSES", 9, "how many fresh processes time each baseline",
                        str(BASELINE_PROCESSES))


#: KSEARCH_BASELINE_PROCESSES's value where it is set (every result's environment then records it), else None.
BASELINE_PROCESSES_SETTING = _baseline_processes_setting()


def baseline_processes() -> int:
    """How many fresh processes time each baseline (the median kept)."""
    return BASELINE_PROCESSES if BASELINE_PROCESSES_SETTING is None else BASELINE_PROCESSES_SETTING


def run_length(asked: int, sets: int) -> int:
    """The calls a worker's run holds when the parent asks for runs of `asked` over a pool of `sets` sets (the last
    run of a batch may be shorter). The parent and the worker compute it alike: a run's first call is the one a
    chained task (Task.chain) gives its own input set whole."""
    return max(1, min(asked, RUN, sets))


def starts_run(call: int, first: int, asked: int, sets: int) -> bool:
    """Whether timed call `call` of a batch whose first call is `first` opens a run (run_length)."""
    return (call - first) % run_length(asked, sets) == 0


#: Batches past the plan's, at most, to take a check that found no committed call to name (a descheduled worker's
#: commitments arrive after the stop: on a loaded 2-core machine three were seen to miss in a row).
EXTRA_BATCHES = 8

#: A timed batch is expected to take at least this many calls, so that its random stop has calls to land between.
MIN_BATCH_CALLS = 4
#: ... and at least this many runs (batch_floor): the stop must have runs' commitments to land between.
RUNS_PER_BATCH = 4

#: The first batch is at most this many calls: nothing the worker says sizes a batch of minutes.
FIRST_BATCH_MAX = 20

#: Per batch, the worker's clock must account for the parent's: lead + calls + gaps (everything between two calls)
#: between MIN_COVERAGE and 1.05 of the parent's elapsed time (plus a few milliseconds of messaging). A clock patched
#: to run slow fails the lower bound; one claiming more time than passed, the upper.
MIN_COVERAGE = 0.8

#: What happens between two calls (the commitment's fingerprint, the next call's inputs) is the harness's own work;
#: the trusted baseline worker measures how long it takes on the same workload. A candidate's time between calls may
#: exceed that by this factor plus GAP_SLACK_S and GAP_CALL_SHARE before the excess is added back to its calls (work
#: moved out of the clock is still work).
GAP_FACTOR = 1.25
#: ... plus this share of the median call (the time between calls of two workers is noisy on a loaded machine).
GAP_CALL_SHARE = 0.1
GAP_SLACK_S = {"gpu": 20e-6, "cpu": 100e-6}
#: Calls of two kinds: when the mean call is this many times the median, some calls did far less work than the
#: others (a candidate serving most timed calls from a cache and computing the rest), and the latency is the mean.
#: Only the checked calls can catch such a candidate, each with the probability that it named a skipped call; with the
#: median, one that skipped two calls in three kept the whole speed of its skipped calls whenever both checks fell on
#: computed ones (1 in 9); with the mean it gains at most 1 / (the share of calls it computed). An honest kernel's
#: median and mean differ by its outliers: 11% of calls at 10x its median stay under this bound.
BIMODAL = 2.0
#: Checks added, in extra batches, to a workload whose timed calls are of two kinds (each names a call at random, so
#: a candidate computing one call in three escapes all of them and the first two with probability (1/3)^8). Best
#: effort: a loaded machine that leaves some of them untaken does not fail the candidate.
BIMODAL_CHECKS = 6
#: A run's calls are queued and timed together (worker.Worker.go), so each call's time is its run's mean and calls of
#: two kinds within a run do not show. One timed batch of a checked workload, picked at random by the parent, runs
#: one call a run (each call evaluated and synchronised on its own): the two-kinds test reads that batch's calls, and
#: the latency comes from the other batches.
PROBE_BATCHES = 1
#: A run's inputs are all made before its first call, so a candidate can find them and move work between the calls of
#: a run (compute two calls' outputs in one call, return the other at once): the run's total stays honest, the
#: median call does not. When the runs' median mean call is over RUN_BOUND times the median call, the latency is the
#: runs' median mean: such a candidate gains at most RUN_BOUND (BIMODAL's 2x otherwise). An honest run trips it only
#: when its first call (after the harness's work between runs) is over 1 + 6 x 0.5 = 4 times its others in runs of
#: six (2 times in runs of two).
RUN_BOUND = 1.5


def two_kinds(times: list[float]) -> bool:
    """Whether the calls' mean is over BIMODAL times their median."""
    return len(times) >= 4 and statistics.fmean(times) > BIMODAL * statistics.median(times)


def batch_error(elapsed: float, n: int, times: list[float], gaps: list[float] | None = None,
                lead: float = 0.0) -> str | None:
    """Why the worker's times for one batch of at most n calls (the parent may stop it early) cannot be believed."""
    gaps = gaps if gaps is not None else []
    if not 1 <= len(times) <= n or len(gaps) not in (0, len(times)) or any(
            not (isinstance(t, (int, float)) and math.isfinite(t) and t >= 0) for t in [*times, *gaps, lead]):
        return "the worker reported malformed timings"
    total = sum(times) + sum(gaps) + lead
    if total > elapsed * 1.05 + 2e-3:
        return f"impossible timings: the worker claims {total:.4g}s inside {elapsed:.4g}s of wall clock"
    if total < elapsed * MIN_COVERAGE - 5e-3:
        return (f"inconsistent timings: the worker claims {total:.4g}s of {elapsed:.4g}s of wall clock "
                "(was a timer patched?)")
    return None


def per_run(values: list[float], runs: list[int] | None) -> list[float]:
    """The mean of `values` over each run (consecutive groups of the given lengths); each value its own run when
    `runs` is None or does not add up to len(values)."""
    if not runs or sum(runs) != len(values) or any(r < 1 for r in runs):
        return list(values)
    out, k = [], 0
    for r in runs:
        out.append(statistics.fmean(values[k:k + r]))
        k += r
    return out


def combine(batches: list[tuple[float, int, list[float]]], gaps: list[list[float]] | None = None,
            trusted_gap: float | None = None, slack: float = 0.0, leads: list[float] | None = None,
            runs: list[list[int]] | None = None) -> Measured:
    """batches: (parent elapsed seconds, calls, worker per-call times); gaps: per batch, the worker's time between
    calls; runs: per batch, the lengths of its runs (RUN). The worker's times are finer but only believed when they
    fit inside the parent's clock; a worker that claims more time than passed, or far less, is lying (a patched timer)
    and the evaluation fails. With a trusted gap (the baseline's time between calls on this workload, per call of a
    run), a call is as long as its own time, or its run's time plus gaps per call less what the harness itself needs
    there (GAP_FACTOR), whichever is longer: work moved out of the clock, into any gap of a run, is counted."""
    all_worker: list[float] = []
    cycles: list[float] = []
    run_means: list[float] = []
    for k, (elapsed, _n, times) in enumerate(batches):
        n = len(times) or 1
        g = gaps[k] if gaps is not None else []
        error = batch_error(elapsed, n, times, g, leads[k] if leads else 0.0) if g else batch_error(elapsed, n, times)
        if error:
            return Measured(elapsed / n, 0.0, "parent", error)
        all_worker.extend(times)
        run_means.extend(per_run(times, runs[k] if runs else None))
        if g:
            cycles.extend(per_run([t + gg for t, gg in zip(times, g, strict=True)], runs[k] if runs else None))
    med = statistics.median(all_worker)
    q = statistics.quantiles(all_worker, n=4) if len(all_worker) >= 4 else [med, med, med]
    source = "worker"
    if two_kinds(all_worker):
        med, source = statistics.fmean(all_worker), "mean"
    if statistics.median(run_means) > RUN_BOUND * med:
        med, source = statistics.median(run_means), "run"
    if trusted_gap is not None and cycles:
        bound = statistics.median(cycles) - (GAP_FACTOR * trusted_gap + slack + GAP_CALL_SHARE * med)
        if bound > med:
            med, source = bound, "cycle"
    return Measured(med, (q[2] - q[0]) / med if med > 0 else 0.0, source)


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
