"""A finished run's end: its best few timed again in turns (search.confirm), then the holdout of the run's pick.

A search keeps the highest of its single measurements, so its best leans high: on an H100 an attention search's best
of 0.982x came back at a median of 0.952x and its third, 0.967x in the search, at 0.965x (docs/search.md). So where
the confirmation names a pick (the highest median of the new scores), the pick is the run's result: `best.py` holds
its source, the holdout judges it and `ksearch export` takes it. The search's own record stays as it was measured
(meta `best_candidate`, `best_score`, the world model's path to it); meta `chosen_candidate` names the result, the
search's best where no confirmation ran or none passed all its new evaluations.

`ksearch confirm` times an ended run's best again later (check_again): kept beside the run's own confirmation, which
stays the one that chose its result, or with --adopt taking its place, its pick the run's result.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ksearch.config import RunConfig
from ksearch.harness import EvalResult
from ksearch.search.confirm import (
    BY_ADOPT,
    CHOSEN,
    LATER_FILE,
    Confirmation,
    Retimed,
    confirm_at_end,
    confirm_run,
    confirmations,
    recording,
    take_confirmation,
    write_confirmation,
)
from ksearch.search.state import LoopState
from ksearch.store import RunStore

#: How `ksearch watch`, `runs` and `compare` show a run at its end while its best few are timed again: its stored
#: status is `holdout` (store.owner.ACTIVE) from the confirmation through the holdout evaluation, the result chosen
#: in between.
TIMING_AGAIN = "timing best again"


def shown_stage(status: str, meta: Mapping[str, Any]) -> str:
    """`status` as shown (store.owner.effective_status), a run's end told apart: TIMING_AGAIN while its best few are
    timed again (its result not chosen yet: no meta CHOSEN, which a resume clears), `holdout` once its result is
    judged on the holdout workloads."""
    return TIMING_AGAIN if status == "holdout" and not meta.get(CHOSEN) else status


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


@dataclass
class Check:
    """`ksearch confirm`'s outcome: its confirmation, the file it is kept in, the run's result after it, and whether
    its pick was adopted, with the pick's holdout verdict where the task has holdout workloads."""

    confirmation: Confirmation
    written: Path
    result: str | None
    adopted: bool = False
    holdout: EvalResult | None = None


def check_again(path: Path, top: int | None, times: int | None, judge: Callable[[str], EvalResult],
                holdout: Callable[[str], EvalResult] | None, adopt: bool,
                on_result: Callable[[Retimed, EvalResult], None] | None = None) -> Check:
    """An ended run's best timed again (search.confirm.confirm_run), each verdict a `confirm` evaluation of the run.
    With `adopt` and a pick, it becomes the run's confirmation (confirm.json, meta `confirmation`) and its pick the
    run's result, its holdout judged again (with `holdout`); otherwise it is kept as LATER_FILE and the run's own
    confirmation and result stay."""
    store = RunStore(path)
    try:
        final = LoopState.from_json(store.get_state("loop_state") or {})
        out = confirm_run(path, top, times, judge, on_result=recording(store, final, on_result))
        if adopt and out.pick is not None:
            out.by = BY_ADOPT
            written = take_confirmation(store, out)
            return Check(out, written, out.pick.candidate, True, _adopt(store, out.pick.candidate, final, holdout))
        meta = {key: store.get_meta(key) for key in ("confirmation", CHOSEN)}
        own = confirmations(path, meta)[0]
        out.beside = own.get("date") if own else None
        result = meta[CHOSEN] or store.get_meta("best_candidate")
        return Check(out, write_confirmation(path, out, LATER_FILE), result)
    finally:
        store.close()


def _adopt(store: RunStore, pick: str, final: LoopState,
           holdout: Callable[[str], EvalResult] | None) -> EvalResult | None:
    """A later confirmation's pick as an ended run's result, its holdout judged again; the run keeps its status (a
    kill during the holdout leaves it so, with the pick taken and the old verdict)."""
    status = store.get_meta("status")
    try:
        return take_result(store, pick, final, holdout)
    finally:
        store.set_meta("status", status)


def reopen(store: RunStore, best: str | None) -> None:
    """A resumed run searches again: no result is chosen until its next end, so no holdout verdict stands for one
    (its `holdout` evaluation stays in the run's record; `ksearch runs` would put the old pick's figures beside the
    search's best), and `best.py` is the search's best so far again (the bookkeeping rewrites it only when the best
    changes)."""
    store.delete_meta(CHOSEN)
    store.delete_meta("holdout")
    if best is not None:
        store.write_best(store.candidate(best).source(store.path))
