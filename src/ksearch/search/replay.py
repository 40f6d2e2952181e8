"""Replaying a recorded run: its proposer calls as the search used them, and its verdicts, in order, for the same
sources (no hardware needed). The recording is read through the store's read-only reader: a replay never writes
to the run it replays.

A run that was stopped and resumed replays as one continuous search. Its calls table may hold calls the search
never used: those a kill (or Ctrl-C) cut off after they were recorded but before the next commit, which the
resumed search asked again. Each resume records how many calls it found and how many its state had used
(the `resume` event: `calls_recorded`, `calls_committed`); `used_calls` leaves the others out.
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from ksearch.errors import ReplayMismatch
from ksearch.harness.result import EvalResult
from ksearch.store import RunReader


def used_calls(reader: RunReader) -> list[dict[str, Any]]:
    """The run's calls, with their texts, in the order the search used them: without those lost to a kill."""
    lost = lost_call_positions(reader)
    return [asdict(c) for i, c in enumerate(reader.calls(texts=True)) if i not in lost]


def lost_call_positions(reader: RunReader) -> set[int]:
    """Positions (0-based, in the calls table's order) of calls a resume asked again."""
    lost: set[int] = set()
    for e in reader.events("resume"):
        recorded, committed = e.data.get("calls_recorded"), e.data.get("calls_committed")
        if isinstance(recorded, int) and isinstance(committed, int):
            # The resumed state had used the first `committed` calls that were not already lost to an earlier
            # kill; the rest of what was recorded by then is lost to this one.
            used = [i for i in range(recorded) if i not in lost]
            lost.update(used[max(committed, 0):])
    return lost


class RecordedEvaluations:
    """An evaluate function that answers from a recorded run. It refuses a source that differs from the one
    recorded at that position: a replay that diverges is not a replay."""

    def __init__(self, reader: RunReader) -> None:
        sources = {c.id: c for c in reader.candidates()}
        self.items = [(sources[e.candidate_id].source(reader.path), e.result) for e in reader.evaluations("search")]
        self.i = 0

    def __call__(self, source: str) -> EvalResult:
        if self.i >= len(self.items):
            raise ReplayMismatch(f"the replay asked for evaluation {self.i + 1}, but the recording has only "
                                 f"{len(self.items)}")
        recorded, result = self.items[self.i]
        if recorded != source:
            raise ReplayMismatch(f"evaluation {self.i + 1}: the candidate differs from the recorded one; "
                                 "use --reevaluate to measure a diverging search again")
        self.i += 1
        return EvalResult.from_json(result)
