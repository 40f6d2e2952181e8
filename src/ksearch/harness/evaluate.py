"""Judging one candidate: static checks, correctness against a trusted reference, timing against a trusted baseline."""

from __future__ import annotations

import ast
import math
import random
import re
import secrets
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ksearch.backends import Backend, environment
from ksearch.harness import timing
from ksearch.harness.judge import judge
from ksearch.harness.process import WorkerDied, WorkerProcess, start
from ksearch.harness.result import EvalResult, WorkloadResult, geomean
from ksearch.harness.static import check_source
from ksearch.knowledge.lint import lint_source
from ksearch.tasks.base import Task, Workload

TRIALS = 3
_COMPILE_PATTERNS = re.compile(r"compil|nvrtc|metal library|ptxas|program_source|jit", re.IGNORECASE)


@dataclass
class EvalOptions:
    baseline: str | None = None
    workloads: list[str] | None = None
    holdout: bool = False
    timeout_s: float | None = None  # wall clock for the candidate's whole evaluation
    memory_limit_bytes: int = 16 << 30
    seed: int | None = None  # reproduce a verdict: the master seed a result revealed
    lint: bool = True
    extra_env: dict[str, str] = field(default_factory=dict)


def default_timeout(backend: Backend) -> float:
    return 600.0 if backend.is_gpu else 180.0


def _seeds(master: int, workloads: list[Workload]) -> dict[str, list[int]]:
    rng = random.Random(master)
    return {w.name: [rng.getrandbits(62) for _ in range(TRIALS + 1)] for w in workloads}


def _classify_exception(error: str, forbidden_calls: list[str]) -> str:
    if forbidden_calls or "ForbiddenAPIError" in error:
        return "forbidden"
    if _COMPILE_PATTERNS.search(error.splitlines()[-1] if error.strip() else ""):
        return "compile_error"
    return "runtime_error"


def baseline_variants(source: str) -> list[str]:
    """A baseline may time several entry points and keep the fastest (BASELINE_VARIANTS = ("a", "b"))."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return ["run"]
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "BASELINE_VARIANTS"
                                                for t in node.targets):
            try:
                value = ast.literal_eval(node.value)
            except ValueError:
                break
            return [str(v) for v in value] or ["run"]
    return ["run"]


class _Fail(Exception):
    def __init__(self, status: str, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


class Evaluator:
    """Judges candidates of one task on one backend. Keeps the trusted reference worker and the baseline timings
    between evaluations (a search evaluates hundreds of candidates)."""

    def __init__(self, task: Task, backend: Backend, memory_limit_bytes: int = 16 << 30) -> None:
        self.task = task
        self.backend = backend
        self.profile = backend.profile()
        self.memory_limit = memory_limit_bytes
        self._ref: WorkerProcess | None = None
        self._ref_cache: OrderedDict[tuple[str, int, int], tuple[dict[str, str], list[np.ndarray]]] = OrderedDict()
        self._ref_bytes = 0
        self._baselines: dict[tuple[str, str], float] = {}
        self._env: dict[str, Any] | None = None

    @property
    def device(self) -> str:
        return "cpu" if self.backend.family == "cpu" else "gpu"

    def env(self) -> dict[str, Any]:
        if self._env is None:
            self._env = environment(self.backend)
            self._env["hardware_profile"] = self.profile.get("id")
        return self._env

    def close(self) -> None:
        if self._ref is not None:
            self._ref.close()
            self._ref = None

    def __enter__(self) -> Evaluator:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- trusted reference ---------------------------------------------------------------------------------------
    def reference(self, workload: Workload, seed: int, shift: int = 0) -> tuple[dict[str, str], list[np.ndarray]]:
        """Reference outputs for the inputs of (workload, seed); with `shift`, for those inputs as a timed call saw
        them (rotated, see timing.SHIFTS)."""
        key = (workload.name, seed, shift)
        if key in self._ref_cache:
            self._ref_cache.move_to_end(key)
            return self._ref_cache[key]
        deadline = time.monotonic() + 1800
        if self._ref is None or self._ref.proc.poll() is not None:
            self._ref, reply = start("reference", self.task.origin, self.device, 1 << 40, deadline,
                                     env={"MLX_ENABLE_TF32": "0"})
            if not reply.get("ok"):
                raise RuntimeError(f"the reference worker failed to start: {reply.get('error')}")
        reply, arrays = self._ref.request({"op": "reference", "workload": workload.name, "seed": seed,
                                           "shift": shift}, deadline)
        if not reply.get("ok"):
            raise RuntimeError(f"the task's reference failed on {workload.name}: {reply.get('error')}")
        outs = [arrays[f"out{i}"] for i in range(len(arrays))]
        value = (reply["digests"], outs)
        self._ref_cache[key] = value
        self._ref_bytes += sum(o.nbytes for o in outs)
        while self._ref_bytes > (4 << 30) and len(self._ref_cache) > 1:
            _, (_, old) = self._ref_cache.popitem(last=False)
            self._ref_bytes -= sum(o.nbytes for o in old)
        return value

    # -- timing (shared by candidates and baselines) -------------------------------------------------------------
    def _time(self, worker: WorkerProcess, workload: Workload, deadline: float,
              spot_check: bool = False) -> timing.Measured:
        plan = timing.plan(self.task, workload, int(self.profile.get("llc_bytes") or (32 << 20)), self.backend.is_gpu)
        rng = random.SystemRandom()
        pool = [rng.getrandbits(62) for _ in range(plan.pool_sets)]
        reply, _ = worker.request({"op": "prepare", "workload": workload.name, "seeds": pool,
                                   "warmup": plan.warmup}, deadline)
        if not reply.get("ok"):
            raise _Fail(_classify_exception(reply.get("error", ""), worker.forbidden_calls),
                        "failed while timing: " + str(reply.get("error", ""))[-1500:])
        # The worker's estimate only sizes the first, short batch; the rest are sized from the parent's own clock.
        n = min(timing.batch_size(float(reply.get("estimate") or 0.0), plan.target_batch_s), timing.FIRST_BATCH_MAX)
        batches: list[tuple[float, int, list[float]]] = []
        # Timed calls start past every warm-up call, so a candidate that memoised warm-up outputs gains nothing.
        offset = -(-timing.WARMUP_MAX_CALLS // plan.pool_sets) * plan.pool_sets
        retries = 2
        per_call = float(reply.get("estimate") or 0.0)
        total = plan.batches + 1  # + 1: the first batch is the short one
        checked = set(rng.sample(range(total), min(timing.SPOT_CHECKS, total))) if spot_check else set()
        attempt = 0
        while len(batches) < total:
            # Up to twice the calls the batch should take; the parent stops it at a random moment in the second half
            # of its expected length, so the worker cannot tell which calls will be the last (spot checks).
            n_max = min(2 * n, 2 * timing.batch_size(1e-9, 1.0))
            expected = n * per_call if per_call > 0 and math.isfinite(per_call) else plan.target_batch_s
            reply, _ = worker.request({"op": "stage", "n": n_max, "offset": offset}, deadline)
            if not reply.get("ok"):
                raise _Fail(_classify_exception(reply.get("error", ""), worker.forbidden_calls),
                            "failed while timing: " + str(reply.get("error", ""))[-1500:])
            t0 = time.perf_counter()
            stop_at = time.monotonic() + expected * rng.uniform(0.5, 1.0)
            reply, _ = worker.request({"op": "go", "n": n_max, "offset": offset}, deadline, stop_at=stop_at)
            elapsed = time.perf_counter() - t0
            if not reply.get("ok"):
                raise _Fail(_classify_exception(reply.get("error", ""), worker.forbidden_calls),
                            "failed while timing: " + str(reply.get("error", ""))[-1500:])
            times = list(reply.get("times") or [])
            m = len(times)
            if attempt in checked and 1 <= m <= n_max:
                self._spot_check(worker, workload, pool, offset, m, rng, deadline)
            attempt += 1
            offset += max(m, 1)
            # A batch whose times disagree with the parent's clock is measured again (a load spike on a busy machine
            # does not repeat; a patched clock does), then kept so that combine() reports it.
            if timing.batch_error(elapsed, n_max, times) and retries > 0:
                retries -= 1
            else:
                batches.append((elapsed, n_max, times))
            per_call = elapsed / max(m, 1)
            n = timing.batch_size(per_call, plan.target_batch_s)
        worker.request({"op": "release"}, deadline)
        return timing.combine(batches)

    def _spot_check(self, worker: WorkerProcess, w: Workload, pool: list[int], offset: int, done: int,
                    rng: random.SystemRandom, deadline: float) -> None:
        """Judge one of the last timed calls' outputs (the worker kept them) against the reference for that call's
        inputs: timed calls must compute what the trials computed."""
        kept = min(timing.RING, done)
        index = rng.randrange(kept)
        call = offset + done - kept + index
        seed, shift = pool[call % len(pool)], (call // len(pool)) % timing.SHIFTS
        _, ref = self.reference(w, seed, shift)
        max_bytes = 2 * self.task.output_bytes(w) * 2 + (1 << 20)
        reply, arrays = worker.request({"op": "spot", "index": index}, deadline, max_bytes)
        if not reply.get("ok"):
            raise _Fail("runtime_error", f"{w.name}: the worker could not show a timed call's output: "
                        f"{str(reply.get('error', ''))[-500:]}")
        if reply.get("bad_type"):
            raise _Fail("wrong_shape", f"{w.name}: {reply['bad_type']}")
        outs = [arrays[f"out{i}"] for i in range(len(arrays)) if f"out{i}" in arrays]
        verdict = judge(self.task, w, outs, [str(d) for d in reply.get("dtypes", [])], ref)
        if verdict.status != "passed":
            raise _Fail(verdict.status, f"{w.name}: a timed call (not a correctness trial) returned a wrong result, "
                        f"so the candidate behaves differently when timed: {verdict.message}")

    def baseline_latency(self, name: str, workload: Workload, deadline: float) -> float | None:
        key = (name, workload.name)
        if key in self._baselines:
            return self._baselines[key]
        source = self.task.baseline(name).source_for(self.backend.family)
        if source is None:
            return None
        best: float | None = None
        for entry in baseline_variants(source):
            # A baseline timing that was disturbed (its worker stopped by someone, or its clock inconsistent with
            # ours) is measured again rather than believed: a slow baseline would inflate every speedup.
            for _attempt in range(3):
                worker, reply = start("baseline", self.task.origin, self.device, 1 << 40, deadline, source=source,
                                      entry=entry)
                try:
                    if not reply.get("ok"):
                        raise RuntimeError(f"baseline {name} ({entry}) failed to load: {reply.get('error')}")
                    measured = self._time(worker, workload, deadline)
                    disturbed = worker.stops_seen > 0 or measured.error is not None
                finally:
                    worker.close()
                if not disturbed:
                    break
            if best is None or measured.latency_s < best:
                best = measured.latency_s
        self._baselines[key] = best if best is not None else float("nan")
        return best

    # -- the verdict -----------------------------------------------------------------------------------------------
    def evaluate(self, source: str, options: EvalOptions | None = None) -> EvalResult:
        opts = options or EvalOptions()
        t_start = time.monotonic()
        baseline_name = opts.baseline or self.task.default_baseline
        self.task.baseline(baseline_name)  # unknown names fail before any work
        workloads = self.task.select_workloads(self.backend.tier, opts.holdout, opts.workloads)
        if not workloads:
            raise ValueError(f"task {self.task.name} has no {self.backend.tier} workloads to evaluate")
        master = opts.seed if opts.seed is not None else secrets.randbits(62)
        seeds = _seeds(master, workloads)
        result = EvalResult(status="passed", task=self.task.name, backend=self.backend.name, baseline=baseline_name,
                            seeds={"master": [master], **seeds}, environment=self.env())
        result.workloads = [WorkloadResult(name=w.name, split=w.split) for w in workloads]
        try:
            self._static(source, opts, result)
            self._run_candidate(source, opts, workloads, seeds, result, t_start)
        except _Fail as fail:
            result.status, result.message = fail.status, fail.message
        result.duration_s = time.monotonic() - t_start
        if result.status == "passed":
            result.score = geomean([w.speedup for w in result.workloads
                                    if w.split == "search" and w.speedup is not None])
            if any(w.split == "holdout" for w in result.workloads):
                result.holdout_score = geomean([w.speedup for w in result.workloads
                                                if w.split == "holdout" and w.speedup is not None])
        else:
            result.score = 0.0
        return result

    def _static(self, source: str, opts: EvalOptions, result: EvalResult) -> None:
        verdict = check_source(source, self.task.forbidden)
        if verdict.status:
            raise _Fail(verdict.status, verdict.message)
        if not opts.lint:
            return
        diags = lint_source(source, self.backend.name, self.task, forbidden_uses=verdict.forbidden)
        errors = [d for d in diags if d.severity == "error"]
        result.warnings.extend(str(d) for d in diags if d.severity != "error")
        if errors:
            status = "forbidden" if any(d.code == "forbidden-api" for d in errors) else "compile_error"
            raise _Fail(status, "lint: " + "; ".join(str(d) for d in errors[:5]))

    def _run_candidate(self, source: str, opts: EvalOptions, workloads: list[Workload],
                       seeds: dict[str, list[int]], result: EvalResult, t_start: float) -> None:
        timeout = opts.timeout_s or default_timeout(self.backend)
        deadline = t_start + timeout
        worker: WorkerProcess | None = None
        try:
            worker, reply = start("candidate", self.task.origin, self.device, opts.memory_limit_bytes, deadline,
                                  source=source, forbidden=self.task.forbidden, env=opts.extra_env)
            if not reply.get("ok"):
                err = str(reply.get("error", ""))
                status = "forbidden" if (worker.forbidden_calls or "ForbiddenAPIError" in err) else "compile_error"
                raise _Fail(status, "import failed: " + err[-2000:] + _tail(worker))
            for w, wr in zip(workloads, result.workloads, strict=True):
                self._correctness(worker, w, wr, seeds[w.name][:TRIALS], deadline)
            for w, wr in zip(workloads, result.workloads, strict=True):
                measured = self._time(worker, w, deadline, spot_check=True)
                if measured.error:
                    raise _Fail("runtime_error", f"{w.name}: {measured.error}")
                wr.latency_s, wr.latency_spread, wr.timing_source = measured.latency_s, measured.spread, measured.source
                floor = timing.floor_seconds(self.task, w, self.profile)
                if floor:
                    wr.roofline_fraction = floor / measured.latency_s
                    if self.backend.is_gpu and measured.latency_s < floor:
                        raise _Fail("runtime_error", f"{w.name}: {measured.latency_s * 1e6:.2f} us is below the "
                                    f"physical floor of {floor * 1e6:.2f} us: the kernel cannot have done the work")
                # Correctness again on inputs made after timing: a candidate that behaves during the trials and
                # caches or skips work afterwards is caught here.
                self._correctness(worker, w, wr, seeds[w.name][TRIALS:], deadline)
            if worker.forbidden_calls:
                raise _Fail("forbidden", f"forbidden API called at run time: {worker.forbidden_calls[0]}")
            out = worker.output_tail()
            if out:
                result.message = out
            # The candidate's processes die before any baseline is timed: a thread or child left running could
            # otherwise slow the baseline down (reproduced: SIGSTOP/SIGCONT on the baseline worker made an honest
            # softmax look 8x faster than it is).
            worker.close()
            worker = None
            for w, wr in zip(workloads, result.workloads, strict=True):
                base = self.baseline_latency(result.baseline, w, time.monotonic() + 1800)
                wr.baseline_latency_s = base
                if base and wr.latency_s:
                    wr.speedup = base / wr.latency_s
        except _Fail as fail:
            # Whatever the candidate printed is shown with every verdict (never believed): the user sees what ran, and
            # a wrong answer is easier to debug with the candidate's own prints.
            out = worker.output_tail() if worker is not None else ""
            if out and out not in fail.message:
                fail.message += "\n" + out
            raise
        except WorkerDied as died:
            status = {"timeout": "timeout"}.get(died.kind, "runtime_error")
            if worker is not None and worker.forbidden_calls:
                status = "forbidden"
            msg = f"the candidate exceeded the {timeout:.0f}s time limit" if died.kind == "timeout" else str(died)
            raise _Fail(status, msg + (_tail(worker) if worker else "")) from died
        finally:
            if worker is not None:
                worker.close()

    def _correctness(self, worker: WorkerProcess, w: Workload, wr: WorkloadResult, seeds: list[int],
                     deadline: float) -> None:
        seen: dict[str, int] = {}
        max_bytes = 2 * self.task.output_bytes(w) * 2 + (1 << 20)  # bf16 widens to fp32 on the wire
        for seed in seeds:
            digests, ref = self.reference(w, seed)
            reply, arrays = worker.request({"op": "trial", "workload": w.name, "seed": seed}, deadline, max_bytes)
            if worker.forbidden_calls:
                raise _Fail("forbidden", f"forbidden API called at run time: {worker.forbidden_calls[0]}")
            if not reply.get("ok"):
                err = str(reply.get("error", ""))
                raise _Fail(_classify_exception(err, worker.forbidden_calls),
                            f"{w.name}: run() raised:\n{err[-2000:]}{_tail(worker)}")
            if reply.get("bad_type"):
                raise _Fail("wrong_shape", f"{w.name}: {reply['bad_type']}")
            if reply.get("before") != digests:
                raise _Fail("wrong_answer", f"{w.name}: the inputs the candidate's process saw differ from the trusted "
                            "generator's (was the generator patched?)")
            if reply.get("after") != reply.get("before"):
                changed = [k for k in digests if (reply.get("after") or {}).get(k) != digests[k]]
                raise _Fail("wrong_answer", f"{w.name}: run() modified its inputs ({', '.join(changed)}); inputs "
                            "are read-only")
            outs = [arrays[f"out{i}"] for i in range(len(arrays)) if f"out{i}" in arrays]
            verdict = judge(self.task, w, outs, [str(d) for d in reply.get("dtypes", [])], ref)
            wr.max_abs_err = max(wr.max_abs_err or 0.0, verdict.max_abs)
            wr.max_rel_err = max(wr.max_rel_err or 0.0, verdict.max_rel)
            if verdict.status != "passed":
                wr.status = verdict.status
                raise _Fail(verdict.status, f"{w.name} (seed {seed}): {verdict.message}")
            key = "".join(a.tobytes()[:4096].hex() for a in outs[:1])
            if key in seen:
                raise _Fail("wrong_answer", f"{w.name}: the output did not change when the inputs changed")
            seen[key] = seed


def _tail(worker: WorkerProcess | None) -> str:
    if worker is None:
        return ""
    out = worker.output_tail()
    return ("\n" + out) if out else ""
