"""The refinement cycles of a K-Search run, read back from its events: for each, the action it worked on, its attempts
and best score, why it ended, and every world-model edit around it (the frontier refresh before it, the edit after
it, the follow-up fallback), applied or rejected with the reason.

A cycle runs from its `select` event to its `cycle_end`; a refresh's edits are recorded before the `select` of the
cycle they prepare. Runs recorded before cycles kept their end reason read as "not recorded"; the last cycle of a run
that stopped mid-cycle ends with the run's own reason.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ksearch.store import EventRow

#: How each end reason reads.
REASONS = {
    "stagnation": "stagnation",
    "behind_parent": "could not beat the parent",
    "nothing_new": "nothing new to try",
    "budget": "budget spent",
    "not recorded": "not recorded",
}
WHEN = {"refresh": "frontier refresh before the cycle", "cycle": "after the cycle", "follow_up": "follow-up fallback"}


@dataclass
class Edit:
    when: str  # see WHEN
    applied: bool
    text: str  # what changed, or why it was refused


@dataclass
class Cycle:
    n: int
    round: int
    node_id: str
    title: str
    attempts: int = 0
    best_score: float | None = None
    outcome: str = "in progress"  # solved | too hard | exhausted | in progress | not closed
    reason: str = "in progress"  # a key of REASONS, or the run's stop kind for a cycle the run's end cut short
    why: str = ""
    edits: list[Edit] = field(default_factory=list)

    @property
    def reason_text(self) -> str:
        return REASONS.get(self.reason, self.reason.replace("_", " "))


def _edit(e: EventRow) -> Edit | None:
    d: dict[str, Any] = e.data
    if e.kind == "edit":
        return Edit(WHEN.get(str(d.get("purpose")), "after the cycle"), True,
                    "; ".join(str(c) for c in d.get("changes") or []) or "no change")
    if e.kind == "edit_rejected":
        return Edit(WHEN.get(str(d.get("purpose")), "after the cycle"), False, str(d.get("reason") or ""))
    if e.kind == "edit_fallback":
        changes = "; ".join(str(c) for c in d.get("changes") or [])
        return Edit(WHEN["follow_up"], True, f"{d.get('message') or d.get('source') or ''}: {changes}".strip(": "))
    if e.kind == "frontier_refresh" and d.get("by") == "fallback":
        return Edit(WHEN["refresh"], True, "automatic: " + "; ".join(str(c) for c in d.get("changes") or []))
    return None


def read_cycles(events: list[EventRow], stop_kind: str | None, stop_reason: str | None,
                finished: bool) -> list[Cycle]:
    cycles: list[Cycle] = []
    pending: list[Edit] = []  # a refresh's edits, for the cycle they prepare
    current: Cycle | None = None
    for e in events:
        d = e.data
        if e.kind == "select":
            if current is not None and current.reason == "in progress":  # its end was not recorded
                current.reason = "not recorded"
                current.outcome = "unknown" if current.outcome == "in progress" else current.outcome
            current = Cycle(len(cycles) + 1, e.round, str(d.get("node_id")), str(d.get("title") or d.get("node_id")))
            current.edits.extend(pending)
            pending = []
            cycles.append(current)
            continue
        edit = _edit(e)
        if edit is not None:
            refresh = edit.when == WHEN["refresh"]
            if refresh or current is None:
                pending.append(edit)
            else:
                current.edits.append(edit)
            continue
        if current is None:
            continue
        if e.kind == "evaluation" and d.get("node_id") == current.node_id and current.reason == "in progress":
            current.attempts += 1
        elif e.kind in ("too_hard", "exhausted") and d.get("node_id") == current.node_id:
            current.outcome = e.kind.replace("_", " ")
        elif e.kind == "cycle_end":
            current.attempts = int(d.get("attempts") or current.attempts)
            score = d.get("best_score")
            current.best_score = float(score) if isinstance(score, int | float) and score > 0 else None
            if current.outcome == "in progress":
                current.outcome = "solved" if d.get("solved", current.best_score is not None) else "not solved"
            current.reason = str(d.get("reason") or "not recorded")
            current.why = str(d.get("why") or "")
    last = cycles[-1] if cycles else None
    if last is not None and last.reason == "in progress" and finished:
        last.outcome = "not closed"
        last.reason = stop_kind or "stopped"
        last.why = stop_reason or ""
    return cycles
