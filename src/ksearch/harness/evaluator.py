"""Judging one candidate: static checks, correctness against a trusted reference, timing against a trusted baseline."""

from __future__ import annotations

import contextlib
import random
import secrets
import threading
import time
from collections import OrderedDict
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from ksearch.harness import timing
from ksearch.harness.baselines import Baselines
from ksearch.harness.digest import fingerprint_numpy, from_raw_bits
from ksearch.harness.judge import Verdict, judge
from ksearch.harness.measure import Check, Fail, Timed, classify_exception, time_workload
from ksearch.harness.process import WorkerDied, WorkerProcess, initialise, spawn, start
from ksearch.harness.result import EvalResult, WorkloadResult, geomean
from ksearch.harness.static import check_source
from ksearch.tasks.base import Task, Workload

if TYPE_CHECKING:  # worker processes import this package; the backends and the linter stay out of their start
    from ksearch.backends import Backend

#: Correctness trials before timing, on seeds drawn once per Evaluator (their references are computed once and serve
#: every candidate a search judges), and after timing, on seeds new for every evaluation.
TRIALS = 2
POST_TRIALS = 1


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


#: The phase part that estimates the candidate's compiles (each workload's first call less its next).
COMPILES = "trials > compiles on each workload's first call (estimated)"
#: The parts of a trial the worker reports (worker.py: Worker.trial).
_TRIAL_PARTS = ("inputs and fingerprints", "call")


def default_timeout(backend: Backend) -> float:
    return 600.0 if backend.is_gpu else 180.0


def _seeds(master: int, workloads: list[Workload], count: int) -> dict[str, list[int]]:
    rng = random.Random(master)
    return {w.name: [rng.getrandbits(62) for _ in range(count)] for w in workloads}

class Evaluator:
    """Judges candidates of one task on one backend. Keeps the trusted reference worker, the references of its trial
    seeds and the baseline timings between evaluations (a search evaluates hundreds of candidates)."""

    def __init__(self, task: Task, backend: Backend, memory_limit_bytes: int = 16 << 30, spare: bool = False) -> None:
        """spare: after each evaluation, spawn the next candidate's worker at once (a search's evaluations follow one
        another: the worker's start, a second of Python and MLX imports on a 2-core CPU, overlaps the search's own
        work and the next candidate's static checks instead of adding to its evaluation)."""
        self.task = task
        self.backend = backend
        self.profile = backend.profile()
        self.memory_limit = memory_limit_bytes
        self._ref: WorkerProcess | None = None
        self._executor: ThreadPoolExecutor | None = None
        self._thread_ident = -1
        self._ref_cache: OrderedDict[tuple[Any, ...], tuple[dict[str, str], list[np.ndarray]]] = OrderedDict()
        self._ref_bytes = 0
        #: Each baseline's timings, measured once per workload for every candidate this evaluator judges.
        self.baselines = Baselines(task, backend.family, backend.emulation, self.device, self._plan,
                                   timing.baseline_processes())
        self._env: dict[str, Any] | None = None
        self._spare_wanted = spare
        self._spare: tuple[tuple[Any, ...], WorkerProcess] | None = None
        self._trial_master = secrets.randbits(62)  # secret; revealed with each verdict
        #: Seconds per phase of the last evaluation (benchmarks/eval_phases.py prints them).
        self.phases: dict[str, float] = {}

    @property
    def device(self) -> str:
        """Where the workers' MLX runs: the CPU for mlx-cpu and for an emulation on the CPU."""
        return "gpu" if self.backend.is_gpu else "cpu"

    def env(self) -> dict[str, Any]:
        if self._env is None:
            from ksearch.backends import environment

            self._env = environment(self.backend)
            self._env["hardware_profile"] = self.profile.get("id")
            if timing.RUN_SETTING is not None:  # timed runs of a length other than the default
                self._env["timing_run"] = timing.RUN_SETTING
            if timing.BASELINE_PROCESSES_SETTING is not None:  # baselines timed in other than the default processes
                self._env["baseline_processes"] = timing.BASELINE_PROCESSES_SETTING
            if self.task.chain is not None:  # a run's calls chained (Task.chain): recorded with every result
                self._env["timing_chain"] = list(self.task.chain)
        return self._env

    def baseline_environment(self, name: str) -> dict[str, Any]:
        """env() and the digest of baseline `name`'s code: what a verdict records and what a resumed search matches
        before it reuses the verdict's baseline timings (baselines.recorded_timings)."""
        return {**self.env(), "baseline_source": self.baselines.source_digest(name)}

    def close(self) -> None:
        self._drop_spare()
        if self._ref is not None:
            self._ref.close()
            self._ref = None
        if self._executor is not None:
            self._executor.shutdown()
            self._executor = None

    def _thread(self) -> ThreadPoolExecutor:
        if self._executor is None:
            self._executor = ThreadPoolExecutor(1, thread_name_prefix="ksearch-reference")
            self._thread_ident = self._executor.submit(threading.get_ident).result()
        return self._executor

    def __enter__(self) -> Evaluator:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @contextlib.contextmanager
    def _phase(self, name: str) -> Iterator[None]:
        t0 = time.perf_counter()
        try:
            yield
        finally:
            self.phases[name] = self.phases.get(name, 0.0) + time.perf_counter() - t0

    def _tally(self, name: str, seconds: float) -> None:
        """A part of a phase ("phase > part"), reported beside the phases and not added to them."""
        self.phases[name] = self.phases.get(name, 0.0) + seconds

    def _unwritten(self, verdict: Verdict) -> str:
        """Why an emulated kernel's output may hold NaN it never computed (surface.py fills floating outputs with NaN
        where MLX leaves them uninitialised): the likeliest cause, named."""
        if verdict.max_abs is None and self.backend.emulation:
            return (f" ({self.backend.name} fills an output with NaN before the kernel runs unless init_value= is "
                    "given: a NaN there may be an element the kernel never wrote)")
        return ""

    # -- the next candidate's worker, spawned ahead -----------------------------------------------------------------
    def _spare_key(self, opts: EvalOptions) -> tuple[Any, ...]:
        return (opts.memory_limit_bytes, tuple(sorted(opts.extra_env.items())))

    def _drop_spare(self) -> None:
        if self._spare is not None:
            self._spare[1].close()
            self._spare = None

    def _spawn_spare(self, opts: EvalOptions) -> None:
        """Spawned from the evaluator's caller's thread: a worker dies with the thread that started it."""
        self._drop_spare()
        with contextlib.suppress(OSError):
            self._spare = (self._spare_key(opts), spawn("candidate", self.task.origin, self.device,
                                                        opts.memory_limit_bytes, opts.extra_env))

    def _candidate_process(self, opts: EvalOptions) -> WorkerProcess:
        """The spare when it was spawned for these options and is alive, else a new worker."""
        spare, self._spare = self._spare, None
        if spare is not None:
            key, worker = spare
            if key == self._spare_key(opts) and worker.proc.poll() is None:
                return worker
            worker.close()
        return spawn("candidate", self.task.origin, self.device, opts.memory_limit_bytes, opts.extra_env)

    # -- trusted reference ---------------------------------------------------------------------------------------
    def _reference(self, key: tuple[Any, ...], msg: dict[str, Any], given: dict[str, np.ndarray] | None = None
                   ) -> tuple[dict[str, str], list[np.ndarray]]:
        if key in self._ref_cache:
            self._ref_cache.move_to_end(key)
            return self._ref_cache[key]
        deadline = time.monotonic() + 1800
        if self._ref is None or self._ref.proc.poll() is not None:
            # Started from the evaluator's own long-lived thread: a worker dies with the thread that started it
            # (PR_SET_PDEATHSIG), and the references are computed in that thread while a candidate starts.
            args = ("reference", self.task.origin, self.device, 1 << 40, deadline)
            env = {"MLX_ENABLE_TF32": "0"}
            pool = self._thread()
            if threading.get_ident() == self._thread_ident:
                self._ref, reply = start(*args, env=env)
            else:
                self._ref, reply = pool.submit(start, *args, env=env).result()
            if not reply.get("ok"):
                raise RuntimeError(f"the reference worker failed to start: {reply.get('error')}")
        reply, arrays = self._ref.request({"op": "reference", **msg}, deadline, arrays=given)
        if not reply.get("ok"):
            raise RuntimeError(f"the task's reference failed on {msg['workload']}: {reply.get('error')}")
        outs = [arrays[f"out{i}"] for i in range(len(arrays))]
        value = (reply["digests"], outs)
        self._ref_cache[key] = value
        self._ref_bytes += sum(o.nbytes for o in outs)
        while self._ref_bytes > (4 << 30) and len(self._ref_cache) > 1:
            _, (_, old) = self._ref_cache.popitem(last=False)
            self._ref_bytes -= sum(o.nbytes for o in old)
        return value

    def reference(self, workload: Workload, seed: int) -> tuple[dict[str, str], list[np.ndarray]]:
        """Input digests and reference outputs for the inputs of (workload, seed)."""
        return self._reference((workload.name, seed), {"workload": workload.name, "seed": seed})

    def reference_for_call(self, check: Check) -> list[np.ndarray]:
        """Reference outputs for the inputs a timed call saw (pool.call_inputs; a chained call's input the previous
        call's output, check.given)."""
        msg = {"workload": check.workload.name, "seed": check.seed, "sets": check.sets, "batch": check.batch_key,
               "call": check.call}
        if check.given is None:
            return self._reference(tuple(msg.values()), msg)[1]
        name, bits, dtype = check.given
        given = {name: from_raw_bits(bits, dtype)}
        return self._reference((*msg.values(), name, fingerprint_numpy([bits])), msg, given)[1]

    def _references(self, needed: list[tuple[Workload, int]]) -> None:
        for w, seed in needed:
            self.reference(w, seed)

    def _plan(self, w: Workload) -> timing.TimingPlan:
        return timing.plan(self.task, w, int(self.profile.get("llc_bytes") or (32 << 20)), self.backend.is_gpu,
                           memory_gb=self.profile.get("memory_gb"))

    # -- the verdict -----------------------------------------------------------------------------------------------
    def evaluate(self, source: str, options: EvalOptions | None = None) -> EvalResult:
        opts = options or EvalOptions()
        t_start = time.monotonic()
        self.phases = {}
        baseline_name = opts.baseline or self.task.default_baseline
        self.task.baseline(baseline_name)  # unknown names fail before any work
        workloads = self.task.select_workloads(self.backend.tier, opts.holdout, opts.workloads)
        if not workloads:
            raise ValueError(f"task {self.task.name} has no {self.backend.tier} workloads to evaluate")
        master = opts.seed if opts.seed is not None else secrets.randbits(62)
        trial_master = opts.seed if opts.seed is not None else self._trial_master
        trials, post = _seeds(trial_master, workloads, TRIALS), _seeds(master ^ 0x5EED, workloads, POST_TRIALS)
        seeds = {w.name: trials[w.name] + post[w.name] for w in workloads}
        result = EvalResult(status="passed", task=self.task.name, backend=self.backend.name, baseline=baseline_name,
                            seeds={"master": [master], "trial_master": [trial_master], **seeds},
                            environment=self.baseline_environment(baseline_name),
                            timing=self.env().get("timing") or "")
        result.workloads = [WorkloadResult(name=w.name, split=w.split) for w in workloads]
        try:
            with self._phase("static"):
                self._static(source, opts, result)
            self._run_candidate(source, opts, workloads, seeds, result, t_start)
        except Fail as fail:
            result.status, result.message = fail.status, fail.message
            for w in result.workloads:  # not judged to the end: "passed" there read as a verdict it never had
                if w.status == "passed" and w.speedup is None:
                    w.status = fail.status
        result.duration_s = time.monotonic() - t_start
        if self._spare_wanted:
            self._spawn_spare(opts)
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
            raise Fail(verdict.status, verdict.message)
        if not opts.lint:
            return
        from ksearch.knowledge.lint import lint_source

        diags = lint_source(source, self.backend.name, self.task, forbidden_uses=verdict.forbidden)
        errors = [d for d in diags if d.severity == "error"]
        result.warnings.extend(str(d) for d in diags if d.severity != "error")
        if errors:
            status = "forbidden" if any(d.code == "forbidden-api" for d in errors) else "compile_error"
            raise Fail(status, "lint: " + "; ".join(str(d) for d in errors[:5]))

    def _start_candidate(self, source: str, opts: EvalOptions, workloads: list[Workload],
                         seeds: dict[str, list[int]], deadline: float) -> WorkerProcess:
        """Start the candidate's worker; meanwhile, in a thread, the trusted reference worker computes what the
        trials will need (its GPU work overlaps the candidate's import and compiles, never a timed call)."""
        needed = [(w, s) for w in workloads for s in seeds[w.name]]
        refs = self._thread().submit(self._references, needed)
        try:
            with self._phase("start candidate"):
                worker = self._candidate_process(opts)
                reply = initialise(worker, self.task.origin, self.device, deadline, source=source,
                                   forbidden=self.task.forbidden, emulation=self.backend.emulation)
        except BaseException:
            refs.result()
            raise
        with self._phase("references (waiting)"):
            try:
                refs.result()
            except BaseException:
                worker.close()
                raise
        if not reply.get("ok"):
            err = str(reply.get("error", ""))
            status = "forbidden" if (worker.forbidden_calls or "ForbiddenAPIError" in err) else "compile_error"
            tail = _tail(worker)
            worker.close()
            raise Fail(status, "import failed: " + err[-2000:] + tail)
        return worker

    def _run_candidate(self, source: str, opts: EvalOptions, workloads: list[Workload],
                       seeds: dict[str, list[int]], result: EvalResult, t_start: float) -> None:
        timeout = opts.timeout_s or default_timeout(self.backend)
        deadline = t_start + timeout
        worker: WorkerProcess | None = None
        timed: dict[str, Timed] = {}
        try:
            worker = self._start_candidate(source, opts, workloads, seeds, deadline)
            result.environment = {**result.environment, "containment": worker.containment}
            with self._phase("trials"):
                for w, wr in zip(workloads, result.workloads, strict=True):
                    self._correctness(worker, w, wr, seeds[w.name][:TRIALS], deadline)
            for w, wr in zip(workloads, result.workloads, strict=True):
                with self._phase("timing"):
                    timed[w.name] = time_workload(worker, self.task, w, self._plan(w), deadline, check=True)
                self._tally("timing > checked calls' outputs taken and held to their commitments",
                            timed[w.name].checking_s)
                # Correctness again on inputs made after timing: a candidate that behaves during the trials and
                # caches or skips work afterwards is caught here.
                with self._phase("trials"):
                    self._correctness(worker, w, wr, seeds[w.name][TRIALS:], deadline)
            if worker.forbidden_calls:
                raise Fail("forbidden", f"forbidden API called at run time: {worker.forbidden_calls[0]}")
            out = worker.output_tail()
            if out:
                result.message = out
            # The candidate's processes die before any baseline is timed: a thread or child left running could
            # otherwise slow the baseline down (reproduced: SIGSTOP/SIGCONT on the baseline worker made an honest
            # softmax look 8x faster than it is).
            worker.close()
            worker = None
        except Fail as fail:
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
            msg = f"the candidate exceeded the {timeout:g}s time limit" if died.kind == "timeout" else str(died)
            raise Fail(status, msg + (_tail(worker) if worker else "")) from died
        finally:
            if worker is not None:
                worker.close()
        with self._phase("timed calls judged"):
            for t in timed.values():
                for check in t.checks:
                    self._judge_timed_call(check)
        with self._phase("baselines"):
            base = self.baselines.timings(result.baseline, workloads, time.monotonic() + 1800)
        for w, wr in zip(workloads, result.workloads, strict=True):
            latency, gap = base[w.name].latency_s, base[w.name].between_calls_s
            measured = timing.combine(timed[w.name].rows(), timed[w.name].gaps(), gap,
                                      timing.GAP_SLACK_S["gpu" if self.backend.is_gpu else "cpu"],
                                      timed[w.name].leads(), timed[w.name].runs())
            error = measured.error or timed[w.name].probe_error()
            if error:
                raise Fail("runtime_error", f"{w.name}: {error}")
            wr.latency_s, wr.latency_spread, wr.timing_source = measured.latency_s, measured.spread, measured.source
            runs = [r for rs in timed[w.name].runs() for r in rs]
            wr.timing_run = max(runs, default=None)
            wr.between_calls_s, wr.baseline_between_calls_s = timed[w.name].median_gap(), gap
            wr.baseline_timing_run = base[w.name].run
            floor = timing.floor_seconds(self.task, w, self.profile)
            if floor:
                wr.roofline_fraction = floor / measured.latency_s
                if self.backend.is_gpu and measured.latency_s < floor:
                    raise Fail("runtime_error", f"{w.name}: {measured.latency_s * 1e6:.2f} us is below the "
                               f"physical floor of {floor * 1e6:.2f} us: the kernel cannot have done the work")
            wr.baseline_latency_s = latency
            if latency and wr.latency_s:
                wr.speedup = latency / wr.latency_s

    def _judge_timed_call(self, check: Check) -> None:
        w = check.workload
        t0 = time.perf_counter()
        ref = self.reference_for_call(check)
        t1 = time.perf_counter()
        outs = [from_raw_bits(o, d) for o, d in zip(check.outputs, check.dtypes, strict=False)]
        verdict = judge(self.task, w, outs, check.dtypes, ref)
        self._tally("timed calls judged > references", t1 - t0)
        self._tally("timed calls judged > judging", time.perf_counter() - t1)
        if verdict.status != "passed":
            raise Fail(verdict.status, f"{w.name}: a timed call (not a correctness trial) returned a wrong result, "
                       f"so the candidate behaves differently when timed: {verdict.message}")

    def _correctness(self, worker: WorkerProcess, w: Workload, wr: WorkloadResult, seeds: list[int],
                     deadline: float) -> None:
        seen: dict[str, int] = {}
        max_bytes = 2 * self.task.output_bytes(w) + (1 << 20)
        round_trips: list[float] = []
        for seed in seeds:
            t_ref = time.perf_counter()
            digests, ref = self.reference(w, seed)
            # The first call of a candidate includes its JIT compiles: a phase of its own.
            first = "first trial" not in self.phases
            t0 = time.perf_counter()
            reply, arrays = worker.request({"op": "trial", "workload": w.name, "seed": seed}, deadline, max_bytes)
            t1 = time.perf_counter()
            round_trips.append(t1 - t0)
            if first:
                self.phases["first trial"] = t1 - t0
                self.phases["trials"] = self.phases.get("trials", 0.0) - self.phases["first trial"]
            else:
                self._tally("trials > references", t0 - t_ref)
                # The worker's own account of its parts, for diagnosis only (it runs the candidate: never used for
                # a verdict); the rest of the round trip is the outputs' way to the parent.
                said = {p: float(v) for p, v in (reply.get("seconds") or {}).items()
                        if p in _TRIAL_PARTS and isinstance(v, (int, float)) and 0 <= v <= t1 - t0}
                for part, secs in said.items():
                    self._tally(f"trials > the worker says: {part}", secs)
                self._tally("trials > the rest of the round trip (outputs copied and sent)",
                            max(0.0, t1 - t0 - sum(said.values())))
            if worker.forbidden_calls:
                raise Fail("forbidden", f"forbidden API called at run time: {worker.forbidden_calls[0]}")
            if not reply.get("ok"):
                err = str(reply.get("error", ""))
                raise Fail(classify_exception(err, worker.forbidden_calls, reply.get("status")),
                           f"{w.name}: run() raised:\n{err[-2000:]}{_tail(worker)}")
            if reply.get("bad_type"):
                raise Fail("wrong_shape", f"{w.name}: {reply['bad_type']}")
            if reply.get("before") != digests:
                raise Fail("wrong_answer", f"{w.name}: the inputs the candidate's process saw differ from the trusted "
                           "generator's (was the generator patched?)")
            if reply.get("after") != reply.get("before"):
                changed = [k for k in digests if (reply.get("after") or {}).get(k) != digests[k]]
                raise Fail("wrong_answer", f"{w.name}: run() modified its inputs ({', '.join(changed)}); inputs "
                           "are read-only")
            dtypes = [str(d) for d in reply.get("dtypes", [])]
            raw = [arrays[f"out{i}"] for i in range(len(arrays)) if f"out{i}" in arrays]
            outs = [from_raw_bits(o, d) for o, d in zip(raw, dtypes, strict=False)]
            verdict = judge(self.task, w, outs, dtypes, ref)
            if not first:
                self._tally("trials > judging", time.perf_counter() - t1)
            if verdict.max_abs is None or verdict.max_rel is None:  # NaN or Inf in the output: no error to give
                wr.max_abs_err = wr.max_rel_err = None
            else:
                wr.max_abs_err = max(wr.max_abs_err or 0.0, verdict.max_abs)
                wr.max_rel_err = max(wr.max_rel_err or 0.0, verdict.max_rel)
            if verdict.status != "passed":
                wr.status = verdict.status
                raise Fail(verdict.status, f"{w.name} (seed {seed}): {verdict.message}{self._unwritten(verdict)}")
            # The first 4 KB of the first output (a slice first: tobytes() of the whole would copy tens of MB).
            key = "".join(a.reshape(-1)[:max(1, 4096 // max(1, a.itemsize))].tobytes().hex() for a in raw[:1])
            if key in seen:
                raise Fail("wrong_answer", f"{w.name}: the output did not change when the inputs changed")
            seen[key] = seed
        if len(round_trips) > 1:
            # A workload's first call compiles what its shapes and dtypes need; the next call of the same shapes
            # does not: the difference estimates the candidate's own compile time (eval-phases leaves it out).
            self._tally(COMPILES, max(0.0, round_trips[0] - min(round_trips[1:])))


def _tail(worker: WorkerProcess | None) -> str:
    if worker is None:
        return ""
    out = worker.output_tail()
    return ("\n" + out) if out else ""
