"""Timing a run's best candidates again (at a finished run's end, and `ksearch confirm`).

A search keeps the highest of its single measurements, so its best leans high by about the harness's spread between
evaluations (an attention search on an H100 kept 0.966x and timed the same kernel again at 0.887x; docs/search.md).
Here the top K candidates by search score are evaluated again N times each, in turns (1, 2, ..., K, then again), so
that a machine's drift falls on all of them alike, each time in a fresh candidate process as the search judged them.
The pick is the highest median of the new scores: a choice by measurements the search's selection did not see.

A run keeps two files of them. CONFIRM_FILE (with meta `confirmation`) is the run's confirmation, the one that chose
its result: its end's, or a `ksearch confirm --adopt` whose pick was taken. LATER_FILE is the last `ksearch confirm`
not adopted: a check beside the run's result, which it leaves as it was. Each new verdict is a `confirm` evaluation of
the run, whichever wrote it.
"""

from __future__ import annotations

import json
import statistics
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from ksearch.config import RunConfig
from ksearch.errors import RunError
from ksearch.harness.result import EvalResult
from ksearch.search.state import LoopState
from ksearch.store import RunReader, RunStore
from ksearch.store.owner import ACTIVE, effective_status
from ksearch.store.records import EvaluationRow

#: The run's confirmation, the one that chose its result (the run's end's, or an adopted `ksearch confirm`'s), in the
#: run's directory.
CONFIRM_FILE = "confirm.json"
#: The last `ksearch confirm` whose pick was not adopted, beside CONFIRM_FILE: it never replaces the run's own.
LATER_FILE = "confirm-later.json"

#: The meta key naming the run's result (set at its end, search/run_end.py; a resume clears it until the next end).
CHOSEN = "chosen_candidate"

#: Who timed the candidates again (confirm.json's `by`; files written before it had none).
BY_END = "the run's end"
BY_CONFIRM = "ksearch confirm"  # not adopted: LATER_FILE
BY_ADOPT = "ksearch confirm --adopt"

#: What confirm.json keeps of the machine that timed the candidates again (an evaluation's `environment`): the
#: device and versions its numbers belong to, as every benchmark file records them.
MACHINE_KEYS = ("backend", "device", "driver", "hardware_profile", "mlx", "ksearch", "python", "platform")


@dataclass
class Retimed:
    """One candidate: its search score and what each new evaluation gave."""

    candidate: str
    search_score: float
    scores: list[float] = field(default_factory=list)  # every new evaluation's score (0 where it did not pass)
    statuses: list[str] = field(default_factory=list)

    @property
    def median(self) -> float | None:
        """The median of the new scores where every new evaluation passed; None otherwise (a candidate that fails
        once is not picked)."""
        if not self.scores or any(s != "passed" for s in self.statuses):
            return None
        return statistics.median(self.scores)


@dataclass
class Confirmation:
    run: str
    task: str
    backend: str
    times: int
    candidates: list[Retimed]
    machine: dict[str, Any] = field(default_factory=dict)  # MACHINE_KEYS of the first new evaluation that has them
    date: str = ""  # when the last new evaluation ended, UTC
    by: str = BY_CONFIRM  # BY_END (confirm_at_end) or BY_ADOPT: the report names which timed them
    beside: str | None = None  # a later check's: the `date` of the run's confirmation it was made beside, if any

    @property
    def pick(self) -> Retimed | None:
        medians = [c for c in self.candidates if c.median is not None]
        return max(medians, key=lambda c: c.median or 0.0) if medians else None

    def to_json(self) -> dict[str, Any]:
        pick = self.pick
        return {"run": self.run, "task": self.task, "backend": self.backend, "times": self.times,
                "date": self.date, "machine": self.machine, "by": self.by,
                "pick": pick.candidate if pick else None, "pick_median": pick.median if pick else None,
                "candidates": [{**asdict(c), "median": c.median} for c in self.candidates],
                **({"beside": self.beside} if self.beside is not None else {})}


def top_candidates(evaluations: list[EvaluationRow], best: str | None, top: int) -> list[tuple[str, float]]:
    """The `top` candidates by their passed search score, highest first, among those judged on the device kind that
    judged the run's best (a run with several kinds compares its best on one; a single-process run has one)."""
    def kind(e: EvaluationRow) -> Any:
        return ((e.result.get("environment") or {}).get("evaluator") or {}).get("device_kind")

    searched = [e for e in evaluations if e.kind == "search" and e.status == "passed"]
    best_kind = next((kind(e) for e in searched if e.candidate_id == best), None)
    scores: dict[str, float] = {}
    for e in searched:
        if kind(e) == best_kind:
            scores[e.candidate_id] = max(e.score, scores.get(e.candidate_id, 0.0))
    return sorted(scores.items(), key=lambda item: (-item[1], item[0]))[:top]


def own_counts(config: Any) -> tuple[int, int]:
    """How many of its best and how many times each a run's own end times again (its stored configuration's
    confirm_top and confirm_times): `ksearch confirm`'s defaults. The best RunConfig.confirm_top where its end timed
    none (confirm_top 0) or its configuration does not say."""
    stored = config if isinstance(config, Mapping) else {}

    def count(key: str, default: int) -> int:
        value = stored.get(key)
        return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else default

    return count("confirm_top", RunConfig.confirm_top), count("confirm_times", RunConfig.confirm_times)


def confirm_run(path: Path, top: int | None, times: int | None, evaluate: Callable[[str], EvalResult],
                on_result: Callable[[Retimed, EvalResult], None] | None = None, in_run: bool = False) -> Confirmation:
    """Evaluate the run's top candidates again with `evaluate` (the run's judge: search.start.run_judge, or the
    search's own at its end, `in_run`); `top` / `times` None: the run's own (own_counts). Writes nothing: the caller
    keeps it (confirm_at_end, run_end.check_again). RunError in one line for a run still being searched (unless
    `in_run`), one without a passed candidate, or a bad `top` / `times`."""
    if (top is not None and top < 1) or (times is not None and times < 1):
        raise RunError("--top and --times take 1 or more")
    with RunReader(path) as reader:
        meta = reader.meta()
        evaluations = reader.evaluations(kind="search")
        sources = {c.id: c.source(reader.path) for c in reader.candidates()}
    own_top, own_times = own_counts(meta.get("config"))
    top, times = top or own_top, times or own_times
    status = effective_status(meta.values)
    if status in ACTIVE and not in_run:
        raise RunError(f"run {path.name} is still being searched ({status}); confirm it when it has ended (timing it "
                       "beside a search would slow both)")
    chosen = top_candidates(evaluations, meta.get("best_candidate"), top)
    if not chosen:
        raise RunError(f"run {path.name} has no passed candidate to time again")
    out = Confirmation(path.name, str(meta.get("task")), str(meta.get("backend")), times,
                       [Retimed(cid, score) for cid, score in chosen],
                       by=BY_END if in_run else BY_CONFIRM)
    for _ in range(times):
        for item in out.candidates:  # in turns: drift falls on every candidate alike
            result = evaluate(sources[item.candidate])
            item.scores.append(result.score if result.passed else 0.0)
            item.statuses.append(result.status)
            if not out.machine:
                out.machine = {k: result.environment[k] for k in MACHINE_KEYS if k in result.environment}
            if on_result is not None:
                on_result(item, result)
    out.date = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    return out


def _readable(data: Any) -> dict[str, Any] | None:
    return data if isinstance(data, dict) and isinstance(data.get("candidates"), list) else None


def read_confirmation(path: Path, name: str = CONFIRM_FILE) -> dict[str, Any] | None:
    """The file `name` of the run at `path` as written; None where there is none or it does not read as one."""
    try:
        return _readable(json.loads((path / name).read_text()))
    except (OSError, ValueError):
        return None


def confirmations(path: Path, meta: Mapping[str, Any]) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
    """The run's confirmation (the one that chose its result) and a later `ksearch confirm` beside it that was not
    adopted; None each where there is none. `meta` is the run's (its `confirmation` and CHOSEN).

    A LATER_FILE made beside another confirmation than the run's now (one adopted since, a resumed run's end) is no
    longer later: left out. A `ksearch confirm` once wrote CONFIRM_FILE over the end's whether adopted or not, and
    files before `by` name no writer: a CONFIRM_FILE that is not the end's (meta `confirmation`), by another than the
    end, whose pick is not the run's result, is such a later check, and the end's stands as the run's."""
    own, later = read_confirmation(path), read_confirmation(path, LATER_FILE)
    stored = _readable(meta.get("confirmation"))
    over = None
    if own is None:
        own = stored
    elif stored is not None and own.get("by") != BY_END and own.get("date") != stored.get("date") \
            and own.get("pick") != meta.get(CHOSEN):
        own, over = stored, own
    if later is not None and later.get("beside") != (own.get("date") if own else None):
        later = None
    return own, later or over


def write_confirmation(path: Path, out: Confirmation, name: str = CONFIRM_FILE) -> Path:
    """`out` as the file `name` in the run's directory, written whole or not at all; returns its path."""
    tmp = path / (name + ".tmp")
    tmp.write_text(json.dumps(out.to_json(), indent=2) + "\n")
    return tmp.replace(path / name)


def take_confirmation(store: RunStore, out: Confirmation) -> Path:
    """`out` as the run's confirmation, the one that chooses its result: meta `confirmation` and CONFIRM_FILE."""
    store.set_meta("confirmation", out.to_json())
    return write_confirmation(store.path, out)


def recording(store: RunStore, final: LoopState,
              then: Callable[[Retimed, EvalResult], None] | None = None) -> Callable[[Retimed, EvalResult], None]:
    """confirm_run's `on_result` that keeps each new verdict as a `confirm` evaluation of the run (at the budget spent
    and the round it ended with; none counts against the budget), then calls `then`."""
    def record(item: Retimed, result: EvalResult) -> None:
        with store.transaction():
            store.add_evaluation(item.candidate, final.evaluations_done, final.round, "confirm", result.to_json())
        if then is not None:
            then(item, result)

    return record


def confirm_at_end(store: RunStore, cfg: RunConfig, judge: Callable[[str], EvalResult], final: LoopState,
                   on_event: Callable[[str, dict[str, Any]], None] | None) -> Confirmation:
    """The end of a finished run: its best `confirm_top` timed again `confirm_times` times each by the run's judge
    (its own, or a worker's with several evaluators: the baseline the search timed), each verdict a `confirm`
    evaluation, the whole as meta `confirmation` and confirm.json. A kill here leaves the run `stopped`; --resume
    judges its end again."""
    store.set_meta("status", "holdout")  # readers tell this from the holdout by the result not chosen yet (CHOSEN)

    def tell(item: Retimed, result: EvalResult) -> None:
        if on_event is not None:
            on_event("confirm", {"candidate": item.candidate, "status": result.status, "score": result.score})

    out = confirm_run(store.path, cfg.confirm_top, cfg.confirm_times, judge, on_result=recording(store, final, tell),
                      in_run=True)
    take_confirmation(store, out)
    return out
