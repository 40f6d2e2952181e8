"""Whether a stored run can go on: a resume's configuration (its own, with raised limits) and the refusals that
come before anything is written (a run still running, one with no room left, a limit not above what it used), and
whether a replay can reproduce it (a run that has ended, or as far as it recorded)."""

from __future__ import annotations

import os
import shlex

from ksearch.config import RunConfig, config_from_json
from ksearch.errors import RunError
from ksearch.store import RunReader, RunStore
from ksearch.store.owner import ACTIVE, effective_status, owner_liveness

# -- resuming ----------------------------------------------------------------------------------------------------------


def _used(store: RunStore) -> tuple[int, float]:
    """(evaluations done, wall-time seconds used) of a stored run."""
    state = store.get_state("loop_state") or {}
    return int(store.get_meta("evaluations_done") or 0), float(state.get("wall_time_used_s") or 0.0)


def _spent_limits(store: RunStore, run_cfg: RunConfig) -> dict[str, str]:
    """The raisable limits a run has used up, by flag (--budget, --wall-time), each with its line."""
    done, used = _used(store)
    spent = {}
    if done >= run_cfg.budget:
        spent["--budget"] = f"its {done} evaluations reached the budget of {run_cfg.budget}"
    if run_cfg.wall_time_s is not None and used >= run_cfg.wall_time_s:
        spent["--wall-time"] = f"its {used:.3g} s reached the wall time of {run_cfg.wall_time_s:g} s"
    return spent


def _llm_cap_spent(store: RunStore, run_cfg: RunConfig) -> str | None:
    """Which LLM cap leaves a run no room to go on (None if none does); these cannot change on resume."""
    if run_cfg.policy != "llm":
        return None
    usage = store.get_meta("llm_usage") or {}
    if usage.get("stop_note"):
        return f"its endpoint claimed more than a call's bound and broke a cap ({usage['stop_note']})"
    if run_cfg.llm.max_usd is not None and usage.get("cost_usd", 0) >= run_cfg.llm.max_usd:
        return f"its LLM spend reached the cap of {run_cfg.llm.max_usd:g} USD"
    tokens = int(usage.get("tokens_in", 0)) + int(usage.get("tokens_out", 0))
    if run_cfg.llm.max_tokens_total is not None and tokens >= run_cfg.llm.max_tokens_total:
        return f"its LLM tokens reached the cap of {run_cfg.llm.max_tokens_total}"
    return None


def _no_room(store: RunStore, run_cfg: RunConfig, raised: bool) -> str | None:
    """Why a run has no room to go on (a resume would stop at once) and what to do, or None where it has room.
    It names every limit still used up, so that raising those named is enough (`raised`: some were raised already)."""
    cap = _llm_cap_spent(store, run_cfg)
    if cap is not None:
        return f"{cap}; the LLM caps cannot change on resume; start a new run"
    spent = _spent_limits(store, run_cfg)
    if not spent:
        return None
    flags = " and ".join(spent)
    return (f"{' and '.join(spent.values())}; {'also ' if raised else ''}pass a larger {flags} with --resume to "
            "continue it, or start a new run")


def resume_config(store: RunStore, cfg: RunConfig, limits: dict[str, float | int]) -> RunConfig:
    """The run's own configuration, with new limits (stored with the run) where given. Refused, with nothing
    written: a limit at or below what the run has used, and a finished run that would still have no room."""
    run_cfg = config_from_json(store.get_meta("config"))
    run_cfg.runs_dir = cfg.runs_dir
    name = store.path.name
    owner = store.get_meta("owner") or {}
    if (effective_status(store.meta()) in ACTIVE and owner.get("pid") != os.getpid()
            and owner_liveness(owner, store.get_meta("pid"), store.get_meta("host")) != "gone"):
        where = f"pid {owner.get('pid', store.get_meta('pid'))} on {owner.get('host', store.get_meta('host'))}"
        raise RunError(f"run {name} is still running ({where}); stop it (Ctrl-C, or kill -TERM its pid) before "
                       "resuming it")
    if store.get_meta("status") == "finished" and (store.get_state("loop_state") or {}).get("phase") == "done":
        raise RunError(f"run {name} is finished: its proposer had nothing new left to try; start a new run instead")
    done, wall = _used(store)
    used = {"budget": float(done), "wall_time_s": wall}
    for key, value in limits.items():
        if value <= used[key]:
            what = f"the {used[key]:.0f} evaluations" if key == "budget" else f"the {used[key]:.3g} s"
            flag = "--budget" if key == "budget" else "--wall-time"
            raise RunError(f"{flag} {value:g} is not above {what} run {name} has used; pass a larger one")
        setattr(run_cfg, key, value)
    if store.get_meta("status") == "finished":
        no_room = _no_room(store, run_cfg, raised=bool(limits))
        if no_room is not None:
            raise RunError(f"run {name} is finished: {no_room}")
    if limits:
        with store.transaction():
            store.set_meta("config", run_cfg.to_json())
            store.set_meta("budget", run_cfg.budget)
        store.write_json("config.json", run_cfg.to_json())
    return run_cfg


#: A run in these states has ended: its recording holds the whole search a replay reproduces.
ENDED = ("finished", "failed")


def check_replayable(old: RunReader, stop_after: int | None) -> None:
    """Refuse, before the replay's run directory exists, a replay of a run that has not ended unless it stops where
    the recording does: past it the replay could only fail (its search asks for an evaluation never recorded)."""
    status = old.meta().shown_status
    if status in ENDED:
        return
    recorded = len(old.evaluations("search"))
    if stop_after is not None and stop_after <= recorded:
        return
    raise RunError(f"run {old.path.name} is {status} after {recorded} evaluation(s): a replay reproduces a run that "
                   f"has ended; pass --stop-after {recorded} to replay what it recorded, or finish it first "
                   f"(`ksearch run --resume {shlex.quote(str(old.path.resolve()))}`)")
