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


def _used(store: RunStore) -> tuple[int, float]:
    """(evaluations done, wall-time seconds used) of a stored run."""
    state = store.get_meta("loop_state") or {}
    return int(store.get_meta("evaluations_done") or 0), float(state.get("wall_time_used_s") or 0.0)


def _room(store: RunStore, run_cfg: RunConfig) -> str | None:
    """Which of a run's limits leaves it no room to go on (None if none does): a resume would stop at once."""
    done, used = _used(store)
    usage = store.get_meta("llm_usage") or {}
    if done >= run_cfg.budget:
        return f"its {done} evaluations reached the budget of {run_cfg.budget}"
    if run_cfg.wall_time_s is not None and used >= run_cfg.wall_time_s:
        return f"its {used:.3g} s reached the wall time of {run_cfg.wall_time_s:g} s"
    if run_cfg.policy == "llm" and run_cfg.llm.max_usd is not None and usage.get("cost_usd", 0) >= run_cfg.llm.max_usd:
        return f"its LLM spend reached the cap of {run_cfg.llm.max_usd:g} USD"
    tokens = int(usage.get("tokens_in", 0)) + int(usage.get("tokens_out", 0))
    if run_cfg.policy == "llm" and run_cfg.llm.max_tokens_total is not None and tokens >= run_cfg.llm.max_tokens_total:
        return f"its LLM tokens reached the cap of {run_cfg.llm.max_tokens_total}"
    return None


def _resume_config(store: RunStore, cfg: RunConfig, limits: dict[str, float | int]) -> RunConfig:
    """The run's own configuration, with new limits (stored with the run) where given. Refused, with nothing
    written: a limit at or below what the run has used, and a finished run that would still have no room."""
    run_cfg = config_from_store(store)
    run_cfg.runs_dir = cfg.runs_dir
    name = store.path.name
    if store.get_meta("status") == "finished" and (store.get_meta("loop_state") or {}).get("phase") == "done":
        raise RunError(f"run {name} is finished: its proposer had nothing new left to try; start a new run instead")
    done, wall = _used(store)
    used = {"budget": float(done), "wall_time_s": wall}
    for key, value in limits.items():
        if value <= used[key]:
            what = f"the {used[key]:.0f} evaluations" if key == "budget" else f"the {used[key]:.3g} s"
            flag = "--budget" if key == "budget" else "--wall-time"
            raise RunError(f"{flag} {value:g} is not above {what} run {name} has used; pass a larger one")
        setattr(run_cfg, key, value)
    after = _room(store, run_cfg)
    if store.get_meta("status") == "finished" and after is not None:
        if after.startswith("its LLM"):
            hint = "the LLM caps cannot change on resume; start a new run"
        elif not limits:
            hint = "pass a larger --budget or --wall-time with --resume to continue it, or start a new run"
        else:
            hint = "raise that limit too to continue it, or start a new run"
        raise RunError(f"run {name} is finished: {after}; {hint}")
    if limits:
        with store.transaction():
            store.set_meta("config", run_cfg.to_json())
            store.set_meta("budget", run_cfg.budget)
        (store.path / "config.json").write_text(json.dumps(run_cfg.to_json(), indent=2))
    return run_cfg


def start_or_resume(cfg: RunConfig, resume: str | None = None, replay: str | None = None, reevaluate: bool = False,
                    quiet: bool = False, console: Console | None = None,
                    stop_after: int | None = None, raise_limits: dict[str, float | int | None] | None = None) -> RunOutcome:
    """raise_limits (with resume): new values for RAISABLE limits; a run finished because one of them ran out
    continues under the new ones."""
    evaluate = None
    policy = None
    if resume is not None:
        store = RunStore(resolve_run(resume, cfg.runs_dir))
        run_cfg = _resume_config(store, cfg, {k: v for k, v in (raise_limits or {}).items() if v is not None})
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
