"""The refinement cycles of a K-Search run, read back from its events: for each, the action it worked on, its attempts
and best score, why it ended, and every world-model edit around it (the frontier refresh before it, the edit after
it, the follow-up fallback), applied or rejected with the reason.

A cycle runs from its `select` event to its `cycle_end`; a refresh's edits are recorded before the `select` of the
cycle they prepare. Runs recorded before cycles kept their end reason read as "not recorded"; the last cycle of a run
that stopped mid-cycle ends with the run's own reason. With several evaluators (a run with `dispatch` events) cycles
on different nodes run at once: each event goes to the open cycle of its node, and every cycle the run's end cut
short ends with the run's reason.
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


def _own(e: EventRow, cycles: list[Cycle], current: Cycle | None, overlap: bool) -> Cycle | None:
    """The cycle an event belongs to: with cycles at once (`overlap`), the last one on the event's node; else the
    current one."""
    node = e.data.get("node_id")
    if overlap and node is not None:
        return next((c for c in reversed(cycles) if c.node_id == str(node)), None)
    return current


def read_cycles(events: list[EventRow], stop_kind: str | None, stop_reason: str | None,
                finished: bool) -> list[Cycle]:
    cycles: list[Cycle] = []
    pending: list[Edit] = []  # a refresh's edits, for the cycle they prepare
    current: Cycle | None = None
    overlap = any(e.kind == "dispatch" for e in events)
    for e in events:
        d = e.data
        cycle = _own(e, cycles, current, overlap)
        if e.kind == "select":
            if cycle is not None and cycle.reason == "in progress":  # its end was not recorded
                cycle.reason = "not recorded"
                cycle.outcome = "unknown" if cycle.outcome == "in progress" else cycle.outcome
            current = Cycle(len(cycles) + 1, e.round, str(d.get("node_id")), str(d.get("title") or d.get("node_id")))
            current.edits.extend(pending)
            pending = []
            cycles.append(current)
            continue
        edit = _edit(e)
        if edit is not None:
            if edit.when == WHEN["refresh"] or cycle is None:
                pending.append(edit)
            else:
                cycle.edits.append(edit)
            continue
        if cycle is None:
            continue
        if e.kind == "evaluation" and d.get("node_id") == cycle.node_id and cycle.reason == "in progress":
            cycle.attempts += 1
        elif e.kind in ("too_hard", "exhausted") and d.get("node_id") == cycle.node_id:
            cycle.outcome = e.kind.replace("_", " ")
        elif e.kind == "cycle_end":
            cycle.attempts = int(d.get("attempts") or cycle.attempts)
            score = d.get("best_score")
            cycle.best_score = float(score) if isinstance(score, int | float) and score > 0 else None
            if cycle.outcome == "in progress":
                cycle.outcome = "solved" if d.get("solved", cycle.best_score is not None) else "not solved"
            cycle.reason = str(d.get("reason") or "not recorded")
            cycle.why = str(d.get("why") or "")
    for c in cycles:  # one at a time, only the last can be open; with several evaluators, any the end cut short
        if c.reason == "in progress" and finished:
            c.outcome = "not closed"
            c.reason = stop_kind or "stopped"
            c.why = stop_reason or ""
    return cycles
