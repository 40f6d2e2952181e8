"""Replaying a finished run: the recorded verdicts, in order, for the same sources (no hardware needed)."""

from __future__ import annotations

from ksearch.errors import ReplayMismatch
from ksearch.harness.result import EvalResult
from ksearch.store import RunStore


class RecordedEvaluations:
    """An evaluate function that answers from a finished run. It refuses a source that differs from the one
    recorded at that position: a replay that diverges is not a replay."""

    def __init__(self, store: RunStore) -> None:
        self.items = []
        for e in store.evaluations("search"):
            src = store.candidate(e["candidate_id"]).source(store.path)
            self.items.append((src, e["result"]))
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
