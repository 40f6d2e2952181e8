"""Timing one workload in one worker (a candidate's or a trusted baseline's): warm-up and timed batches, and, for a
candidate, the timed calls picked for checking, their outputs taken and held against the worker's commitments.

The worker runs the calls and keeps the clock (see worker.Worker.go); nothing it says is believed unchecked:
- its per-call times must add up to the parent's clock for each batch (timing.batch_error);
- it commits to every call's outputs (a fingerprint sent the moment the call ends), and must show, for a call the
  parent names after stopping the batch at a random moment, outputs that match the commitment; the evaluator then
  judges those outputs against the reference for that call's inputs. Skipping the work of any call, or returning a
  stale answer, is caught with the probability that the call is the one checked; every call of a batch is equally
  likely to be, and the worker learns which one only after it has committed to all of them;
- the time it spends between calls (the harness's own work there) is bounded by what the trusted baseline worker
  spends there (timing.combine).
"""

from __future__ import annotations

import math
import random
import re
import statistics
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ksearch.harness import timing
from ksearch.harness.batch import Batch, run_batch
from ksearch.harness.digest import fingerprint_numpy
from ksearch.harness.process import WorkerProcess
from ksearch.tasks.base import Task, Workload

#: Warm-up batches at least, so that the run length (timing.run_for) comes from a batch with no compile in it.
WARMUP_BATCHES = 3
#: The warm-up ends when its last batch's calls take at most this much more than its fastest batch's (or after the
#: plan's settle_s seconds, WARMUP_MAX_BATCHES batches): calls of 40-80 us move 15-50% between one-second measurements
#: in one process on the H200 (process_spread.py), so a tighter rule would only run to the limit there.
WARMUP_STEADY = 0.15
WARMUP_MAX_BATCHES = 12


def _least_warm_up(plan: timing.TimingPlan, calls: int, spent: float, estimates: list[float]) -> bool:
    """Whether the warm-up so far (its calls, seconds and per-batch call estimates) is the least it must be."""
    return calls >= plan.warmup and spent >= plan.warmup_s and len(estimates) >= WARMUP_BATCHES


def _settled(plan: timing.TimingPlan, estimates: list[float], calls: int, run: int) -> bool:
    """Whether a ring's outputs have been made for runs of `run` (where the plan asks it) and the last batch was as
    fast as the fastest."""
    filled = calls >= timing.ring_for(run) or not plan.fill_ring
    return filled and estimates[-1] <= (1 + WARMUP_STEADY) * min(estimates)


_COMPILE_PATTERNS = re.compile(r"compil|nvrtc|metal library|ptxas|program_source|jit", re.IGNORECASE)


class Fail(Exception):
    """A verdict other than passed, with its message."""

    def __init__(self, status: str, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


def classify_exception(error: str, forbidden_calls: list[str], status: Any = None) -> str:
    """The verdict of a failure in the candidate's worker. `status`: what the exception itself said it was (the Metal
    emulation's errors carry compile_error or runtime_error); only those two are taken from the worker."""
    if forbidden_calls or "ForbiddenAPIError" in error:
        return "forbidden"
    if status in ("compile_error", "runtime_error"):
        return str(status)
    if _COMPILE_PATTERNS.search(error.splitlines()[-1] if error.strip() else ""):
        return "compile_error"
    return "runtime_error"


@dataclass
class Check:
    """A timed call picked for checking: its outputs (exact bits), to be judged against the reference rebuilt for
    its inputs (pool.call_inputs)."""

    workload: Workload
    seed: int
    sets: int
    batch_key: int
    call: int
    outputs: list[np.ndarray]
    dtypes: list[str]
    #: A chained call's input (Task.chain): name, the previous call's output (exact bits) and its dtype; None where
    #: the call took its own input set whole (independent calls, or the first of a run).
    given: tuple[str, np.ndarray, str] | None = None


@dataclass
class Timed:
    batches: list[Batch] = field(default_factory=list)
    checks: list[Check] = field(default_factory=list)
    pool_sets: int = 0
    #: Seconds spent taking checked calls' outputs and holding them against their commitments (inside timing).
    checking_s: float = 0.0

    def timed(self) -> list[Batch]:
        """The batches the latency comes from: all but the probes (timing.PROBE_BATCHES), unless there are no others."""
        return [b for b in self.batches if not b.probe] or self.batches

    def calls_for_two_kinds(self) -> list[float]:
        """Per-call times to test for calls of two kinds: the probes' (each call timed on its own) where there are
        probes, otherwise every batch's."""
        probes = [b for b in self.batches if b.probe]
        return [t for b in (probes or self.batches) for t in b.times]

    def probe_error(self) -> str | None:
        """Why a probe's times cannot be believed (timing.batch_error): a probe is not part of the latency, but a
        patched timer there is a patched timer all the same."""
        for b in self.batches:
            if b.probe:
                lead = float(b.reply.get("lead") or 0.0)
                error = timing.batch_error(b.elapsed, len(b.times), b.times, b.gaps or None, lead)
                if error:
                    return error
        return None

    def rows(self) -> list[tuple[float, int, list[float]]]:
        return [(b.elapsed, len(b.times), b.times) for b in self.timed()]

    def gaps(self) -> list[list[float]]:
        return [b.gaps for b in self.timed()]

    def leads(self) -> list[float]:
        return [float(b.reply.get("lead") or 0.0) for b in self.timed()]

    def runs(self) -> list[list[int]]:
        return [b.runs for b in self.timed()]

    def median_gap(self) -> float | None:
        """The median over runs of a run's time between calls, per call (timing.per_run), from the batches the latency
        comes from (a probe's runs of one call each are not comparable)."""
        gaps = sorted(g for b in self.timed() for g in timing.per_run(b.gaps, b.runs))
        return gaps[len(gaps) // 2] if gaps else None


def _failed(worker: WorkerProcess, reply: dict[str, Any]) -> Fail:
    err = str(reply.get("error", ""))
    return Fail(classify_exception(err, worker.forbidden_calls, reply.get("status")),
                "failed while timing: " + err[-1500:])


def time_workload(worker: WorkerProcess, task: Task, workload: Workload, plan: timing.TimingPlan, deadline: float,
                  check: bool, rng: random.SystemRandom | None = None) -> Timed:
    """Warm up, then time plan.batches batches; with `check`, take plan.checks timed calls' outputs for judging.
    Raises Fail for what the worker did wrong; a batch whose times disagree with the parent's clock is measured again
    twice (a load spike does not repeat; a patched clock does), then kept so that timing.combine reports it."""
    rng = rng or random.SystemRandom()
    seed = rng.getrandbits(62)
    reply, _ = worker.request({"op": "prepare", "workload": workload.name, "seed": seed,
                               "sets": plan.pool_sets}, deadline)
    if not reply.get("ok"):
        raise _failed(worker, reply)
    timed = Timed(pool_sets=plan.pool_sets)
    offset = 0

    def batch(n_max: int, stop_at: float | None, run: int, probe: bool = False) -> Batch:
        nonlocal offset
        b = run_batch(worker, offset, n_max, rng.getrandbits(62), deadline, stop_at, run)
        b.probe = probe
        if not b.reply.get("ok"):
            raise _failed(worker, b.reply)
        m = len(b.times)
        if check and len(b.commits) != m:
            raise Fail("runtime_error", f"{workload.name}: the worker reported {m} timed calls but committed to the "
                       f"outputs of {len(b.commits)}: every timed call's outputs must be committed to as it ends")
        offset += max(m, 1)
        return b

    # Warm-up: batches like the timed ones, at least plan.warmup calls, plan.warmup_s seconds and WARMUP_BATCHES
    # batches, until the worker has made the outputs of a ring's worth of calls (plan.fill_ring: every allocation the
    # runs make then comes from MLX's cache) and the last batch's calls are as fast as the fastest batch's
    # (WARMUP_STEADY), for plan.settle_s at most. The first calls of a shape build MLX's graph caches and JIT kernels: a
    # cold start measured against a warm baseline showed a 1.2x phantom speedup of a kernel over itself; and on the
    # H200, after three warm-up calls, 5 of 12 workload evaluations of 0.45-1 ms calls ran slow warm-ups (runs of 7-19
    # calls of 24 followed) and were timed 0.88-1.29x the plain loop, where the others agreed within 3%
    # (fidelity-runs-of-24-softmax|rmsnorm-*.json); the softmax starter then agreed within 1%.
    n, calls, spent, per_call = 1, 0, 0.0, 0.0
    estimates: list[float] = []
    warm_until = math.inf  # settle_s from the end of the first batch, whose compiles may take longer
    while True:
        b = batch(n, None, timing.run_for(plan, min(estimates, default=0.0)))
        calls, spent = calls + len(b.times), spent + b.elapsed
        per_call = b.elapsed / max(1, len(b.times))
        estimates.append(statistics.median(b.times) if b.times else per_call)
        warm_until = min(warm_until, time.monotonic() + plan.settle_s)
        run = timing.run_for(plan, min(estimates))
        if _least_warm_up(plan, calls, spent, estimates) and (
                _settled(plan, estimates, calls, run) or len(estimates) >= WARMUP_MAX_BATCHES
                or time.monotonic() > warm_until):
            break
        n = min(max(run, timing.batch_size(per_call, max(plan.warmup_s - spent, per_call))), 4 * n + 4)
    # Every timed batch holds whole runs of one length, fixed here from the warm-up's calls as the worker timed them
    # (timing.run_for, timing.batch_floor). Not from the parent's time per call: that includes the harness's work
    # between calls, which varies, and run lengths that followed it varied from batch to batch (6 to 24 calls for
    # selective_state_update on the H200 with KSEARCH_TIMING_RUN=24) and between the candidate and the baseline.
    # And from the fastest warm-up batch, not the last: a batch's calls are its runs' means and warm-up batches are
    # short, so one slow call there (a compile, a first allocation) inflated the estimate and shortened the runs (to
    # 7-19 calls of 24). A longer run leaves no more room between calls than a shorter.
    n = max(timing.batch_floor(run), min(timing.batch_size(per_call, plan.target_batch_s), timing.FIRST_BATCH_MAX))
    owed = set(rng.sample(range(plan.batches), min(plan.checks, plan.batches))) if check else set()
    # Probes: batches of one call a run, where calls of two kinds show (timing.PROBE_BATCHES).
    probes = set(rng.sample(range(plan.batches), timing.PROBE_BATCHES)) if check and plan.batches >= 3 else set()
    pending_checks = missed = bonus = 0
    retries, index, extra = 2, 0, 0
    escalated = False
    while True:
        if index >= plan.batches and not (pending_checks or bonus) and check and not escalated:
            # Calls of two kinds: some may have skipped their work. More checks, in extra batches (timing.BIMODAL).
            escalated = True
            if timing.two_kinds(timed.calls_for_two_kinds()):
                bonus, extra = timing.BIMODAL_CHECKS, 0
        if not (index < plan.batches or ((pending_checks or bonus) and extra < timing.EXTRA_BATCHES)):
            break
        if index >= plan.batches:
            extra += 1
        # Up to twice the calls the batch should take, stopped at a uniformly random moment of its expected length;
        # once a batch has ended with no commitment in by its stop (a worker descheduled on a loaded machine), the
        # stops fall later: half to one and a half times the expected length, still unknown to the worker.
        n_max = min(2 * n + 2, 4000)
        expected = n * per_call if per_call > 0 else plan.target_batch_s
        low, high = (0.5, 1.5) if missed else (0.05, 1.0)
        probe = index in probes
        b = batch(n_max, time.monotonic() + expected * rng.uniform(low, high), 1 if probe else run, probe)
        if index in owed:
            owed.discard(index)
            pending_checks += 1
        if (pending_checks or bonus) and check:
            if _take_check(worker, task, workload, seed, plan.pool_sets, b, rng, timed, deadline,
                           1 if probe else run):
                if pending_checks:
                    pending_checks -= 1
                else:
                    bonus -= 1
            else:
                missed += 1
        m = max(1, len(b.times))
        if timing.batch_error(b.elapsed, n_max, b.times, b.gaps, float(b.reply.get("lead") or 0.0)) and retries:
            retries -= 1
        else:
            timed.batches.append(b)
            index += 1
        per_call = b.elapsed / m
        n = max(timing.batch_floor(run), timing.batch_size(per_call, plan.target_batch_s))
    if pending_checks:
        raise Fail("runtime_error", f"{workload.name}: no timed call could be checked: the worker's commitments "
                   "kept arriving after the parent had stopped its batches")
    worker.request({"op": "release"}, deadline)
    return timed


def _take_check(worker: WorkerProcess, task: Task, w: Workload, seed: int, sets: int, b: Batch,
                rng: random.SystemRandom, timed: Timed, deadline: float, run: int) -> bool:
    """Name one of the batch's last calls (timing.ring_for the run the parent asked for) committed to before the
    stop, take its outputs and hold them against the commitment. For a chained task (Task.chain) the named call is
    one that took the previous call's output as an input, wherever one qualifies: the previous call's outputs are
    taken and held against their commitment too, the reference is made from them, and where the previous call opened
    its run (its inputs all its own set's) it is judged as well. False when no call qualifies (the check moves to a
    later batch)."""
    m = len(b.times)
    lo, hi = max(0, m - timing.ring_for(run)), b.before_stop
    if hi <= lo:
        return False
    picks = list(range(lo, hi))
    if task.chain is not None:  # a chained call whose predecessor the ring still holds; else one that opens its run
        opens = {i: timing.starts_run(b.first + i, b.first, run, sets) for i in picks}
        picks = [i for i in picks if i > lo and not opens[i]] or [i for i in picks if opens[i]]
    if not picks:
        return False
    call = b.first + rng.choice(picks)
    t0 = time.perf_counter()
    outs, dtypes = _spot(worker, task, w, b, call, deadline)
    given = None
    if task.chain is not None and not timing.starts_run(call, b.first, run, sets):
        before, before_dtypes = _spot(worker, task, w, b, call - 1, deadline)
        name, index = task.chain
        if index >= len(before):
            raise Fail("wrong_shape", f"{w.name}: timed call {call - 1} returned {len(before)} outputs; the task "
                       f"chains output {index} into the next call")
        given = (name, before[index], before_dtypes[index])
        if timing.starts_run(call - 1, b.first, run, sets):
            timed.checks.append(Check(w, seed, sets, b.batch_key, call - 1, before, before_dtypes))
    timed.checks.append(Check(w, seed, sets, b.batch_key, call, outs, dtypes, given))
    timed.checking_s += time.perf_counter() - t0
    return True


def _spot(worker: WorkerProcess, task: Task, w: Workload, b: Batch, call: int,
          deadline: float) -> tuple[list[np.ndarray], list[str]]:
    """A kept timed call's outputs (exact bits) and dtypes, held against the commitment made when the call ended."""
    max_bytes = 2 * task.output_bytes(w) + (1 << 20)
    reply, arrays = worker.request({"op": "spot", "call": call}, deadline, max_bytes)
    if not reply.get("ok"):
        raise Fail("runtime_error", f"{w.name}: the worker could not show a timed call's outputs: "
                   f"{str(reply.get('error', ''))[-500:]}")
    if reply.get("bad_type"):
        raise Fail("wrong_shape", f"{w.name}: {reply['bad_type']}")
    outs = [arrays[f"out{i}"] for i in range(len(arrays)) if f"out{i}" in arrays]
    if fingerprint_numpy(outs) != b.commits[call - b.first]:
        raise Fail("wrong_answer", f"{w.name}: the outputs the worker showed for timed call {call} are not the ones "
                   "it committed to when the call ended, so its timed calls did not compute what it claims")
    return outs, [str(d) for d in reply.get("dtypes", [])]
