"""What `ksearch run` does between parsing and printing: start, resume or replay a run with a live view, and the
final summary table."""

from __future__ import annotations

import json

from rich.console import Console
from rich.table import Table

from ksearch.config import RunConfig
from ksearch.search.live import LiveView
from ksearch.search.run import RunError, RunOutcome, config_from_store, create_run, execute, make_policy
from ksearch.store import RunStore, resolve_run

#: The limits a resume may raise (RunConfig fields); everything else about a run is fixed when it starts.
RAISABLE = ("budget", "wall_time_s")


def _raise_limits(store: RunStore, run_cfg: RunConfig, limits: dict[str, float | int]) -> bool:
    """Apply raised limits to a run being resumed and store them with it; whether any was given. A limit below what
    the run has already used is refused: it would end the run at once."""
    state = store.get_meta("loop_state") or {}
    done, used = int(store.get_meta("evaluations_done") or 0), float(state.get("wall_time_used_s") or 0.0)
    if "budget" in limits and int(limits["budget"]) <= done:
        raise RunError(f"--budget {limits['budget']} is not above the {done} evaluations run {store.path.name} has "
                       "done; pass a larger one")
    if "wall_time_s" in limits and float(limits["wall_time_s"]) <= used:
        raise RunError(f"--wall-time {limits['wall_time_s']:g} is not above the {used:.0f} s run {store.path.name} "
                       "has used; pass a larger one")
    for key, value in limits.items():
        setattr(run_cfg, key, value)
    if limits:
        with store.transaction():
            store.set_meta("config", run_cfg.to_json())
            store.set_meta("budget", run_cfg.budget)
        (store.path / "config.json").write_text(json.dumps(run_cfg.to_json(), indent=2))
    return bool(limits)


def start_or_resume(cfg: RunConfig, resume: str | None = None, replay: str | None = None, reevaluate: bool = False,
                    quiet: bool = False, console: Console | None = None,
                    stop_after: int | None = None, raise_limits: dict[str, float | int | None] | None = None) -> RunOutcome:
    """raise_limits (with resume): new values for RAISABLE limits; a run finished because one of them ran out
    continues under the new ones."""
    evaluate = None
    policy = None
    if resume is not None:
        store = RunStore(resolve_run(resume, cfg.runs_dir))
        status = store.get_meta("status")
        run_cfg = config_from_store(store)
        run_cfg.runs_dir = cfg.runs_dir
        exhausted = (store.get_meta("loop_state") or {}).get("phase") == "done"
        raised = _raise_limits(store, run_cfg, {k: v for k, v in (raise_limits or {}).items() if v is not None})
        if status == "finished" and exhausted:
            raise RunError(f"run {store.path.name} is finished: its proposer had nothing new left to try; start a new "
                           "run instead")
        if status == "finished" and not raised:
            raise RunError(f"run {store.path.name} is finished: its evaluations, wall time or LLM spend are used up; "
                           "pass a larger --budget or --wall-time with --resume to continue it, or start a new run")
    elif replay is not None:
        from ksearch.search.replay import RecordedEvaluations

        old = RunStore(resolve_run(replay, cfg.runs_dir))
        run_cfg = config_from_store(old)
        run_cfg.runs_dir = cfg.runs_dir
        policy = make_policy(run_cfg, replay=old.calls(), strict=reevaluate)
        if not reevaluate:
            evaluate = RecordedEvaluations(old)
        store, _, _ = create_run(run_cfg)
        store.set_meta("replay_of", str(old.path))
    else:
        run_cfg = cfg
        if run_cfg.policy == "llm":
            policy = make_policy(run_cfg)  # fail fast on a missing key before creating the run directory
        store, _, _ = create_run(run_cfg)
    title = (f"ksearch {run_cfg.strategy} on {store.get_meta('task_name')} ({store.get_meta('backend')}, "
             f"{run_cfg.policy} policy) -> {store.path}")
    try:
        with LiveView(run_cfg.budget, title, enabled=not quiet) as view:
            return execute(store, run_cfg, on_event=view, evaluate=evaluate, policy=policy, stop_after=stop_after)
    finally:
        store.close()


def final_table(o: RunOutcome) -> Table:
    s = o.state
    t = Table(title=f"run {o.path.name}: {s.evaluations_done} evaluations "
                    f"({s.duplicates_skipped} duplicates skipped, {s.policy_errors} proposer errors)")
    t.add_column("")
    t.add_column("")
    t.add_row("best candidate", f"{s.best_candidate} ({o.path / 'best.py'})" if s.best_candidate else "none passed")
    t.add_row("best score", f"{s.best_score:.3f}x (start {s.start_score:.3f}x)")
    if o.best_result:
        for w in o.best_result.get("workloads", []):
            sp = w.get("speedup")
            t.add_row(f"  {w['name']}", "-" if sp is None else f"{sp:.3f}x vs {o.best_result.get('baseline')}")
    if o.holdout is not None:
        t.add_row("holdout score", f"{o.holdout.holdout_score or 0:.3f}x ({o.holdout.status})")
    t.add_row("run directory", str(o.path))
    return t
