"""Timing a run's best candidates again (`ksearch confirm`).

A search keeps the highest of its single measurements, so its best leans high by about the harness's spread between
evaluations (an attention search on an H100 kept 0.966x and timed the same kernel again at 0.887x; docs/search.md).
Here the top K candidates by search score are evaluated again N times each, in turns (1, 2, ..., K, then again), so
that a machine's drift falls on all of them alike, each time in a fresh candidate process as the search judged them.
The pick is the highest median of the new scores: a choice by measurements the search's selection did not see.
"""

from __future__ import annotations

import json
import statistics
import time
from collections.abc import Callable
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

#: Where `ksearch confirm` leaves its result, in the run's directory.
CONFIRM_FILE = "confirm.json"

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
    by: str = "ksearch confirm"  # or "the run's end" (confirm_at_end): the report names which timed them

    @property
    def pick(self) -> Retimed | None:
        medians = [c for c in self.candidates if c.median is not None]
        return max(medians, key=lambda c: c.median or 0.0) if medians else None

    def to_json(self) -> dict[str, Any]:
        pick = self.pick
        return {"run": self.run, "task": self.task, "backend": self.backend, "times": self.times,
                "date": self.date, "machine": self.machine, "by": self.by,
                "pick": pick.candidate if pick else None, "pick_median": pick.median if pick else None,
                "candidates": [{**asdict(c), "median": c.median} for c in self.candidates]}


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


def confirm_run(path: Path, top: int, times: int, evaluate: Callable[[str], EvalResult],
                on_result: Callable[[Retimed, EvalResult], None] | None = None, in_run: bool = False) -> Confirmation:
    """Evaluate the run's top candidates again with `evaluate` (the run's judge: search.start.run_judge, or the
    search's own at its end, `in_run`); RunError in one line for a run still being searched (unless `in_run`), one
    without a passed candidate, or a bad `top` / `times`."""
    if top < 1 or times < 1:
        raise RunError("--top and --times take 1 or more")
    with RunReader(path) as reader:
        meta = reader.meta()
        evaluations = reader.evaluations(kind="search")
        sources = {c.id: c.source(reader.path) for c in reader.candidates()}
    status = effective_status(meta.values)
    if status in ACTIVE and not in_run:
        raise RunError(f"run {path.name} is still being searched ({status}); confirm it when it has ended (timing it "
                       "beside a search would slow both)")
    chosen = top_candidates(evaluations, meta.get("best_candidate"), top)
    if not chosen:
        raise RunError(f"run {path.name} has no passed candidate to time again")
    out = Confirmation(path.name, str(meta.get("task")), str(meta.get("backend")), times,
                       [Retimed(cid, score) for cid, score in chosen],
                       by="the run's end" if in_run else "ksearch confirm")
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
    write_confirmation(path, out)
    return out


def read_confirmation(path: Path) -> dict[str, Any] | None:
    """confirm.json of the run at `path` (its end's confirmation, or `ksearch confirm`'s later one); None where there
    is none or it does not read as one."""
    try:
        data = json.loads((path / CONFIRM_FILE).read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) and isinstance(data.get("candidates"), list) else None


def write_confirmation(path: Path, out: Confirmation) -> None:
    """confirm.json in the run's directory, written whole or not at all."""
    tmp = path / (CONFIRM_FILE + ".tmp")
    tmp.write_text(json.dumps(out.to_json(), indent=2) + "\n")
    tmp.replace(path / CONFIRM_FILE)


def confirm_at_end(store: RunStore, cfg: RunConfig, judge: Callable[[str], EvalResult], final: LoopState,
                   on_event: Callable[[str, dict[str, Any]], None] | None) -> Confirmation:
    """The end of a finished run: its best `confirm_top` timed again `confirm_times` times each by the run's judge
    (its own, or a worker's with several evaluators: the baseline the search timed), each verdict a `confirm`
    evaluation, the whole as meta `confirmation` and confirm.json. A kill here leaves the run `stopped`; --resume
    judges its end again."""
    store.set_meta("status", "holdout")

    def record(item: Retimed, result: EvalResult) -> None:
        with store.transaction():
            store.add_evaluation(item.candidate, final.evaluations_done, final.round, "confirm", result.to_json())
        if on_event is not None:
            on_event("confirm", {"candidate": item.candidate, "status": result.status, "score": result.score})

    out = confirm_run(store.path, cfg.confirm_top, cfg.confirm_times, judge, on_result=record, in_run=True)
    store.set_meta("confirmation", out.to_json())
    return out
