"""Starting a search, in the order it happens: configuration -> create, resume or replay the run -> the strategy's
loop -> its end: the best few timed again, the holdout evaluation of the run's pick (search.run_end).

    start_run(cfg)                  a new run
    start_run(cfg, resume=RUN)      continue a stopped run with the settings it started with (only its limits can
                                    be raised)
    start_run(cfg, replay=RUN)      reproduce a finished run from its recordings (proposer calls, and verdicts unless
                                    reevaluate)

Whoever shows the run hands in one callback, `on_event(kind, data)`: it sees "run_start" (strategy, task, backend,
policy, budget, path) once the run exists, then every event the strategy records. Nothing here draws on a terminal.
"""

from __future__ import annotations

import contextlib
import os
import random
import signal
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ksearch.backends import Backend, get_backend
from ksearch.backends.detect import FAMILY
from ksearch.config import RunConfig, config_from_json
from ksearch.errors import BackendUnavailable, RunError
from ksearch.harness import EvalResult
from ksearch.harness.profile import ProfileReport
from ksearch.policy.base import Policy, PolicyContext
from ksearch.search import ledger, run_baselines
from ksearch.search.bookkeeping import SearchSetup
from ksearch.search.confirm import Confirmation
from ksearch.search.judge import Judge
from ksearch.search.pool import EvaluatorPool, InlinePool, device_kind
from ksearch.search.resumable import check_replayable, resume_config
from ksearch.search.run_end import CHOSEN, judge_end, reopen
from ksearch.search.state import LoopState, restore_rng
from ksearch.store import RunReader, RunStore, folder_problem, new_run_id, resolve_run, runs_dir
from ksearch.store.owner import current_owner
from ksearch.tasks import Task, get_task

STRATEGIES = ("ksearch", "evolve", "greedy")
POLICIES = ("offline", "llm")
#: The limits a resume may raise (RunConfig fields); everything else about a run is fixed when it starts.
RAISABLE = ("budget", "wall_time_s")

EventSink = Callable[[str, dict[str, Any]], None]


@dataclass
class RunOutcome:
    path: Path
    state: LoopState
    holdout: EvalResult | None
    best_result: dict[str, Any] | None
    status: str = "finished"  # finished | stopped | failed
    stop_kind: str = "budget"  # see StrategyBase.end_reason
    stop_reason: str = ""  # one line
    llm_usage: dict[str, Any] | None = None  # the run's LLM ledger (search.ledger)
    confirmation: Confirmation | None = None  # its best timed again at its end (search.confirm), where it was
    chosen: str | None = None  # the run's result: its confirmation's pick, else the search's best (search.run_end)


def start_run(cfg: RunConfig, resume: str | None = None, replay: str | None = None, reevaluate: bool = False,
              stop_after: int | None = None, raise_limits: dict[str, float | int | None] | None = None,
              on_event: EventSink | None = None, placement: dict[str, Any] | None = None) -> RunOutcome:
    """Create (or reopen) the run, then search until a limit or stop_after ends it.

    raise_limits (with resume): new values for RAISABLE limits; a run finished because one of them ran out
    continues under the new ones. placement (with resume): `workers` and `ray_address` for this sitting (both
    None: the run's own; `workers` alone: on this machine). Bad input raises a UsageError before anything is
    written or evaluated; with several workers, they are started (and a bad address, a missing Ray or too few
    devices refused) before the run exists."""
    evaluate = None
    policy = None
    pool = None
    if resume is not None:
        store = RunStore(resolve_run(resume, cfg.runs_dir))
        try:
            done = int(store.get_meta("evaluations_done") or 0)
            if stop_after is not None and stop_after <= done:  # it counts the run's evaluations, not this sitting's
                raise RunError(f"--stop-after {stop_after}: run {store.path.name} has done {done} evaluations "
                               f"already; pass more than {done} to go on")
            run_cfg = resume_config(store, cfg, {k: v for k, v in (raise_limits or {}).items() if v is not None})
            own = _place(run_cfg, placement or {})
            if run_cfg.policy == "llm":
                policy = make_policy(run_cfg)  # before any worker starts: the key leaves the environment first
            try:
                pool = make_pool(run_cfg, store.get_meta("task"), store.get_meta("backend"))
            except RunError as exc:
                if own and run_cfg.ray_address is not None:  # the cluster the run was judged on may be gone
                    raise RunError(f"{exc}; or judge run {store.path.name} elsewhere: --resume with --workers N "
                                   "(this machine) or --ray-address A") from exc
                raise
        except BaseException:
            store.close()
            raise
    elif replay is not None:
        from ksearch.search.replay import RecordedEvaluations, used_calls

        with RunReader(resolve_run(replay, cfg.runs_dir)) as old:
            run_cfg = config_from_json(old.meta().get("config"))
            run_cfg.runs_dir = cfg.runs_dir
            if run_cfg.workers > 1 or run_cfg.ray_address:
                raise RunError(f"run {old.path.name} was judged by {run_cfg.workers} workers, whose verdicts "
                               "arrived in an order a replay cannot reproduce; replay runs of one worker")
            check_replayable(old, stop_after)
            policy = make_policy(run_cfg, replay=used_calls(old), strict=reevaluate)
            if not reevaluate:
                evaluate = RecordedEvaluations(old)
            store, _, _ = create_run(run_cfg)
            store.set_meta("replay_of", str(old.path))
    else:
        run_cfg = cfg
        if run_cfg.policy == "llm":
            # Fail fast, before the run directory exists, on a missing key or an endpoint nothing answers at.
            policy = make_policy(run_cfg, reach=True)
        pool = make_pool(run_cfg, run_cfg.task, run_cfg.backend)
        try:
            store, _, _ = create_run(run_cfg)
        except BaseException:
            if pool is not None:
                pool.close()
            raise
    try:
        if on_event is not None:
            on_event("run_start", {"strategy": run_cfg.strategy, "task": store.get_meta("task_name"),
                                   "backend": store.get_meta("backend"), "policy": run_cfg.policy,
                                   "budget": run_cfg.budget, "path": str(store.path),
                                   "workers": len(pool.workers()) if pool is not None else 1})
        return execute(store, run_cfg, on_event=on_event, evaluate=evaluate, policy=policy, stop_after=stop_after,
                       pool=pool)
    finally:
        if pool is not None:
            pool.close()
        store.close()


def make_pool(cfg: RunConfig, task: str, backend_name: str) -> EvaluatorPool | None:
    """The run's evaluators when there are several (or a cluster is named); None for the single-process search.
    Every refusal is one line, before anything is evaluated."""
    if cfg.workers <= 1 and cfg.ray_address is None:
        return None
    from ksearch.search import ray_pool

    if not ray_pool.available():
        raise RunError(ray_pool.not_installed(cfg))
    get_task(task)  # an unknown task is refused here, not by every worker
    backend = _backend(backend_name, cfg)
    if cfg.ray_address is not None:
        ray_pool.check_address(cfg.ray_address)
    else:
        here = ray_pool.local_devices(backend)
        if cfg.workers > here:
            unit = "CPU slots" if not backend.is_gpu or backend.family == "cpu" else "GPUs"
            raise RunError(f"--workers {cfg.workers} is more than the {here} {unit} this machine has for "
                           f"{backend.name}; pass --workers {here} or fewer, or --ray-address for a cluster")
    return ray_pool.RayPool(task, backend, cfg)


def _place(run_cfg: RunConfig, placement: dict[str, Any]) -> bool:
    """This sitting's evaluators, from --resume's flags: --ray-address a cluster (--workers N of it, else the run's
    count), --workers N alone this machine, neither the run's own placement (True)."""
    workers, address = placement.get("workers"), placement.get("ray_address")
    if address is not None or workers is not None:
        run_cfg.ray_address = address
    if workers is not None:
        run_cfg.workers = workers
    return address is None and workers is None


def _backend(name: str, cfg: RunConfig) -> Backend:
    """The run's backend. A driver on a cluster may lack it (a Linux driver for Macs' mlx-metal): its evaluators
    have it, and they say so when they start."""
    try:
        return get_backend(name)
    except BackendUnavailable:
        if cfg.ray_address and name in FAMILY:
            return Backend(name, FAMILY[name])  # type: ignore[arg-type]
        raise


# -- the parts of a run and the loop -----------------------------------------------------------------------------------


def make_policy(cfg: RunConfig, replay: list[dict[str, Any]] | None = None, strict: bool = False,
                reach: bool = False) -> Policy:
    """The run's proposer. `reach` (a new run): an LLM endpoint nothing answers at is refused before the run
    exists."""
    if cfg.policy == "offline":
        from ksearch.policy.offline import OfflinePolicy

        return OfflinePolicy()
    if cfg.policy == "llm":
        try:
            from ksearch.policy.llm import make_policy as make_llm
        except ImportError as exc:
            raise RunError(f"the LLM policy is unavailable: {exc}") from exc
        return make_llm(cfg.llm, replay=replay, strict_prompts=strict, reach=reach)  # type: ignore[no-any-return]
    raise RunError(f"unknown policy {cfg.policy!r}; choose one of {', '.join(POLICIES)}")


def _spec(task: Task, backend: Backend, port: dict[str, Any] | None) -> str:
    try:
        from ksearch.knowledge.spec import render_spec
    except ImportError:
        return ""
    return render_spec(task, backend.name, port)


def _port(path: str | None, backend: Backend) -> dict[str, Any] | None:
    if not path:
        return None
    try:
        from ksearch.knowledge.analyzer import analyze_cuda, read_cuda
    except ImportError as exc:
        raise RunError("the CUDA analyzer is unavailable in this installation") from exc
    return analyze_cuda(read_cuda(path, "--from-cuda file", RunError), backend.name)  # type: ignore[no-any-return]


def _strategy(strategy: str, setup: SearchSetup, state: LoopState, wm: dict[str, Any] | None,
              workers: int | None = None) -> Any:
    """The strategy object whose run() is the loop: K-Search with its world model, or a comparison strategy; with
    `workers`, its parallel form, whose run_on(pool) is the loop (search/parallel_strategies.py)."""
    if workers is not None:
        from ksearch.search import parallel_strategies as par
        from ksearch.worldmodel import WorldModel

        if strategy == "ksearch":
            return par.ParallelKSearch(setup, state, WorldModel.from_json(wm) if wm else None, workers)
        return {"evolve": par.ParallelEvolve, "greedy": par.ParallelGreedy}[strategy](setup, state, workers)
    if strategy == "ksearch":
        from ksearch.search.loop import KSearch
        from ksearch.worldmodel import WorldModel

        return KSearch(setup, state, WorldModel.from_json(wm) if wm else None)
    from ksearch.search.strategies import Evolve, Greedy

    return {"evolve": Evolve, "greedy": Greedy}[strategy](setup, state)


def create_run(cfg: RunConfig) -> tuple[RunStore, Task, Backend]:
    if cfg.strategy not in STRATEGIES:
        raise RunError(f"unknown strategy {cfg.strategy!r}; choose one of {', '.join(STRATEGIES)}")
    if cfg.policy not in POLICIES:
        raise RunError(f"unknown policy {cfg.policy!r}; choose one of {', '.join(POLICIES)}")
    task = get_task(cfg.task)
    backend = _backend(cfg.backend, cfg)
    if cfg.baseline is not None and cfg.baseline not in task.baselines:
        raise RunError(f"task {task.name} has no baseline {cfg.baseline!r}; choose one of {', '.join(task.baselines)}")
    if cfg.from_cuda:
        from ksearch.knowledge.analyzer import read_cuda

        read_cuda(cfg.from_cuda, "--from-cuda file", RunError)  # refused here, before the run directory exists
    base = runs_dir(cfg.runs_dir)
    problem = folder_problem(base)
    if problem is not None:
        raise RunError(f"the runs directory {base} {problem}; pass a writable --runs-dir (or KSEARCH_RUNS_DIR)")
    store = RunStore(base / new_run_id(task.name), create=True)
    with store.transaction():
        for k, v in {"task": task.origin or task.name, "task_name": task.name, "backend": backend.name,
                     "policy": cfg.policy, "strategy": cfg.strategy, "budget": cfg.budget, "seed": cfg.seed,
                     "config": cfg.to_json(), "created_at": time.time(), "status": "running",
                     "evaluations_done": 0, "best_candidate": None, "best_score": 0.0, "holdout": None,
                     "llm_usage": {"tokens_in": 0, "tokens_out": 0, "cost_usd": 0.0, "calls": 0}}.items():
            store.set_meta(k, v)
    store.write_json("config.json", cfg.to_json())
    return store, task, backend


def config_from_store(store: RunStore) -> RunConfig:
    return config_from_json(store.get_meta("config"))


class Terminated(BaseException):
    """SIGTERM: end the run the way Ctrl-C does, so its status says stopped and --resume continues it. A
    BaseException like KeyboardInterrupt, so that no `except Exception` on the way swallows it."""


def _stop_on_sigterm() -> None:
    if threading.current_thread() is not threading.main_thread():
        return

    def handler(_signum: int, _frame: Any) -> None:
        raise Terminated("terminated")

    signal.signal(signal.SIGTERM, handler)


def execute(store: RunStore, cfg: RunConfig, on_event: EventSink | None = None,
            evaluate: Callable[[str], EvalResult] | None = None, policy: Policy | None = None,
            stop_after: int | None = None, pool: EvaluatorPool | None = None,
            profile: Callable[[str, EvalResult | None], ProfileReport] | None = None) -> RunOutcome:
    """Run (or continue) the search in `store` until its budget is spent, then the final holdout evaluation.
    With `pool` (several evaluators) the parallel driver runs the strategy (search/parallel.py); a run left with
    candidates in flight or several open cycles continues under it with one in-process evaluator. `profile`: how a
    candidate's hardware counters are taken (default: the judge's own, harness/profile.py)."""
    # The policy first: an LLM policy takes its key out of the environment, so that nothing this run starts (a
    # backend probe, the judge's workers) is ever started while the key is still in this process's environment.
    pol = policy or make_policy(cfg)
    task = get_task(store.get_meta("task"))
    backend = _backend(store.get_meta("backend"), cfg)
    saved = store.get_state("loop_state")
    state = LoopState.from_json(saved) if saved else LoopState()
    rng = restore_rng(state.rng) if state.rng else random.Random(cfg.seed)
    if state.policy:
        pol.load_state(state.policy)
    if saved:
        # Calls recorded after the last commit were lost with the process that made them; the resumed policy
        # asks them again. A replay skips the lost ones (search.replay.used_calls).
        recorded = store.call_count()
        committed = state.policy.get("calls", recorded) if isinstance(state.policy, dict) else recorded
        store.add_event(state.round, "resume", {"evaluations_done": state.evaluations_done,
                                                "calls_recorded": recorded, "calls_committed": int(committed)})
    port = _port(cfg.from_cuda, backend)
    ctx = PolicyContext(task=task, backend=backend, rng=rng, spec=_spec(task, backend, port), port_context=port)
    judge = Judge(task, backend, cfg) if evaluate is None and pool is None else None
    if saved and judge is not None:
        run_baselines.reuse_recorded(store, judge.ev, cfg.baseline or task.default_baseline, state.round)
    run_baselines.share_across_workers(pool, store, bool(saved), state.round)
    if pool is None and (state.in_flight or state.cycles):
        # A parallel run continued by one evaluator here: its candidates in flight are judged first.
        kind = device_kind(judge.ev.env()) if judge is not None else "local"
        pool = InlinePool(evaluate or judge, 1, kind)  # type: ignore[arg-type]
    setup = SearchSetup(store=store, policy=pol, ctx=ctx, evaluate=evaluate or judge,  # type: ignore[arg-type]
                        budget=cfg.budget, stop_after=stop_after, stagnation_window=cfg.stagnation_window,
                        wall_time_s=cfg.wall_time_s, weights=cfg.weights,
                        on_event=on_event or (lambda _k, _d: None),
                        max_consecutive_errors=cfg.max_consecutive_errors,
                        profile=profile or (judge.profile if judge else None), profile_mode=cfg.profile)
    # This process owns the run from here (readers tell a run whose owner is gone as interrupted); a previous end's
    # reason no longer holds.
    environment = judge.ev.env() if judge else (pool_environment(pool) if pool is not None else {})
    with store.transaction():
        store.set_meta("status", "running")
        store.set_meta("owner", current_owner())
        store.set_meta("pid", os.getpid())
        store.set_meta("host", socket.gethostname())
        store.set_meta("environment", environment)
        for key in ("stop_kind", "stop_reason"):
            store.delete_meta(key)
        if saved:
            reopen(store, state.best_candidate)
        if pool is not None:
            store.set_meta("workers", [w.to_json() for w in pool.workers()])
    if pool is not None:
        setup.on_event("workers", {"workers": [w.to_json() for w in pool.workers()]})
    lost = ledger.recover_lost_call(store, state.round)
    if lost is not None and on_event is not None:
        on_event("call_lost", lost)
    if hasattr(pol, "load_usage"):
        # The ledger is written with every call (lost ones at their bound); a loop-state snapshot may lag it.
        pol.load_usage(ledger.usage(store))
    _stop_on_sigterm()
    holdout = None
    confirmation = None
    try:
        strategy = _strategy(cfg.strategy, setup, state, store.latest_world_model() if saved else None,
                             len(pool.workers()) if pool is not None else None)
        final = strategy.run_on(pool) if pool is not None else strategy.run()
        if pool is not None:
            store.set_meta("workers", [w.to_json() for w in pool.workers()])
        kind, reason = strategy.end_reason()
        failed = kind in FAILURES
        done = not failed and (strategy.spent() or final.phase == "done")
        # With several evaluators the pool judges synchronously on one of its workers (a replay has neither).
        holdout_fn = judge.holdout if judge is not None else getattr(pool, "holdout", None)
        again_fn = judge if judge is not None else getattr(pool, "judge", None)
        if done and final.best_candidate:
            confirmation, holdout = judge_end(store, cfg, final, again_fn,
                                              holdout_fn if task.holdout_workloads(backend.tier) else None, on_event)
        status = "failed" if failed else "finished" if done else "stopped"
        _end(store, status, kind, reason, state.round, on_event)
    except BaseException as exc:
        with contextlib.suppress(Exception):  # the error that brought us here is the one to report
            _end(store, "stopped", *_interruption(exc), state.round, on_event)
        raise
    finally:
        if judge is not None:
            judge.close()
    best = None
    if final.best_candidate:
        rows = [e for e in store.evaluations("search") if e["candidate_id"] == final.best_candidate]
        best = rows[-1]["result"] if rows else None
    return RunOutcome(store.path, final, holdout, best, status, kind, reason, ledger.usage(store), confirmation,
                      store.get_meta(CHOSEN))


def pool_environment(pool: EvaluatorPool) -> dict[str, Any]:
    """The hardware and versions of the pool's first evaluator (each verdict carries its own)."""
    env = getattr(pool, "environment", None)
    return dict(env()) if callable(env) else {}


#: The end kinds that fail a run (exit code 1): its proposer could not work.
FAILURES = ("endpoint_failure", "proposer_failure")


def _end(store: RunStore, status: str, kind: str, reason: str, round_: int, on_event: EventSink | None) -> None:
    """The run's end, with its reason, in one commit (and as the last event)."""
    data = {"status": status, "kind": kind, "reason": reason}
    with store.transaction():
        store.set_meta("status", status)
        store.set_meta("stop_kind", kind)
        store.set_meta("stop_reason", reason)
        store.set_meta("finished_at", time.time())
        store.add_event(round_, "run_end", data)
    if on_event is not None:
        on_event("run_end", data)


def _interruption(exc: BaseException) -> tuple[str, str]:
    if isinstance(exc, KeyboardInterrupt):
        return "interrupted", "interrupted (Ctrl-C); --resume continues it"
    if isinstance(exc, Terminated):
        return "interrupted", "interrupted (SIGTERM); --resume continues it"
    first = (str(exc).splitlines() or [""])[0][:300]
    return "error", f"stopped by an error: {type(exc).__name__}: {first}"
