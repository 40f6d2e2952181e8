"""A finished run's end: its best few timed again in turns (search.confirm), then the holdout of the run's pick.

A search keeps the highest of its single measurements, so its best leans high: on an H100 an attention search's best
of 0.982x came back at a median of 0.952x and its third, 0.967x in the search, at 0.965x (docs/search.md). So where
the confirmation names a pick (the highest median of the new scores), the pick is the run's result: `best.py` holds
its source, the holdout judges it and `ksearch export` takes it. The search's own record stays as it was measured
(meta `best_candidate`, `best_score`, the world model's path to it); meta `chosen_candidate` names the result, the
search's best where no confirmation ran or none passed all its new evaluations.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from ksearch.config import RunConfig
from ksearch.harness import EvalResult
from ksearch.search.confirm import Confirmation, confirm_at_end
from ksearch.search.state import LoopState
from ksearch.store import RunStore

#: The meta key naming the run's result (set at its end; a resume clears it until the next end).
CHOSEN = "chosen_candidate"


def judge_end(store: RunStore, cfg: RunConfig, final: LoopState, judge: Callable[[str], EvalResult] | None,
              holdout: Callable[[str], EvalResult] | None,
              on_event: Callable[[str, dict[str, Any]], None] | None) -> tuple[Confirmation | None, EvalResult | None]:
    """For a finished run with a best: the confirmation (with `judge`, where `cfg.confirm_top` asks for it), the
    result chosen and written as `best.py`, then its holdout evaluation (with `holdout`, where the task has holdout
    workloads: the caller passes None otherwise). A kill in between leaves the run `stopped`; --resume does it
    again."""
    if final.best_candidate is None:
        return None, None
    confirmation = confirm_at_end(store, cfg, judge, final, on_event) if judge is not None and cfg.confirm_top > 0 \
        else None
    pick = confirmation.pick if confirmation is not None else None
    chosen = pick.candidate if pick is not None else final.best_candidate
    return confirmation, take_result(store, chosen, final, holdout)


def take_result(store: RunStore, chosen: str, final: LoopState,
                holdout: Callable[[str], EvalResult] | None) -> EvalResult | None:
    """`chosen` as the run's result: meta CHOSEN, `best.py`, then its holdout verdict (with `holdout`) as a
    `holdout` evaluation and meta `holdout`. The run's status is the caller's to set."""
    source = store.candidate(chosen).source(store.path)
    store.write_best(source)
    store.set_meta(CHOSEN, chosen)
    if holdout is None:
        return None
    store.set_meta("status", "holdout")
    verdict = holdout(source)
    with store.transaction():
        store.add_evaluation(chosen, final.evaluations_done, final.round, "holdout", verdict.to_json())
        store.set_meta("holdout", verdict.to_json())
    return verdict


def adopt_pick(path: Path, pick: str, holdout: Callable[[str], EvalResult] | None) -> EvalResult | None:
    """A later confirmation's pick (`ksearch confirm --adopt`) as a finished run's result, its holdout judged again;
    the run stays `finished` (a kill during the holdout leaves it so, with the pick taken and the old verdict)."""
    store = RunStore(path)
    try:
        status = store.get_meta("status")
        final = LoopState.from_json(store.get_state("loop_state") or {})
        try:
            return take_result(store, pick, final, holdout)
        finally:
            store.set_meta("status", status)
    finally:
        store.close()


def reopen(store: RunStore, best: str | None) -> None:
    """A resumed run searches again: no result is chosen until its next end, so no holdout verdict stands for one
    (its `holdout` evaluation stays in the run's record; `ksearch runs` would put the old pick's figures beside the
    search's best), and `best.py` is the search's best so far again (the bookkeeping rewrites it only when the best
    changes)."""
    store.delete_meta(CHOSEN)
    store.delete_meta("holdout")
    if best is not None:
        store.write_best(store.candidate(best).source(store.path))
