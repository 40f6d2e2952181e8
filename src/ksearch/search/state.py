"""The search loop's resumable state: everything needed to continue exactly after a kill, as one JSON object stored
in the run's meta table in the same transaction as each evaluation."""

from __future__ import annotations

import random
from dataclasses import asdict, dataclass, field
from typing import Any

from ksearch.policy.base import Attempt


@dataclass
class Cycle:
    node_id: str
    attempts: list[Attempt] = field(default_factory=list)
    no_improve: int = 0
    best_candidate: str | None = None
    best_score: float = 0.0
    best_params: dict[str, Any] | None = None
    last_candidate: str | None = None
    last_feedback: dict[str, Any] | None = None
    consecutive_skips: int = 0
    best_at_start: float = 0.0
    #: The score of the code the action starts from (the parent node's solution; the starting kernel at the root);
    #: 0 when it did not pass, which turns the rule below off.
    parent_score: float = 0.0
    #: Attempts in a row, since the cycle's first pass, after which its best still did not beat parent_score.
    behind_parent: int = 0
    best_feedback: dict[str, Any] | None = None  # the verdict on best_candidate
    #: With several evaluators: the cycle's candidate being judged (one at a time, so that a debug follows the
    #: failure it debugs) and the device kind its verdicts come from (its candidates are compared on that kind only).
    in_flight: str | None = None
    device_kind: str | None = None

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        d["attempts"] = [a.to_json() for a in self.attempts]
        return d

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Cycle:
        d = dict(d)
        d["attempts"] = [Attempt(**a) for a in d.get("attempts", [])]
        return cls(**d)


@dataclass
class LoopState:
    round: int = 0
    evaluations_done: int = 0
    duplicates_skipped: int = 0
    policy_errors: int = 0
    best_candidate: str | None = None
    best_score: float = 0.0
    best_params: dict[str, Any] | None = None
    start_candidate: str | None = None
    start_score: float = 0.0
    cycles_without_improvement: int = 0
    visits: dict[str, int] = field(default_factory=dict)
    excluded: list[str] = field(default_factory=list)  # subtrees set aside by a backtrack
    cycle: Cycle | None = None
    analysis: str = ""
    phase: str = "init"  # init | search | holdout | done
    rng: Any = None  # random.Random state as JSON
    policy: dict[str, Any] = field(default_factory=dict)
    strategy: dict[str, Any] = field(default_factory=dict)  # evolve / greedy archives
    wall_time_used_s: float = 0.0
    #: With several evaluators (search/parallel.py): the cycles open besides `cycle`, the candidates dispatched and
    #: not yet judged (resume judges them again), how many were dispatched, and the best per device kind.
    cycles: list[Cycle] = field(default_factory=list)
    in_flight: list[dict[str, Any]] = field(default_factory=list)
    dispatched: int = 0
    bests: dict[str, dict[str, Any]] = field(default_factory=dict)
    #: The device kind the run's best is compared on: the one that judged the starting kernel.
    device_kind: str | None = None

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        d["cycle"] = self.cycle.to_json() if self.cycle else None
        d["cycles"] = [c.to_json() for c in self.cycles]
        return d

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> LoopState:
        d = dict(d)
        cyc = d.pop("cycle", None)
        cycles = d.pop("cycles", None) or []
        s = cls(**d)
        s.cycle = Cycle.from_json(cyc) if cyc else None
        s.cycles = [Cycle.from_json(c) for c in cycles]
        return s


def rng_state(rng: random.Random) -> Any:
    version, internal, gauss = rng.getstate()
    return [version, list(internal), gauss]


def restore_rng(state: Any) -> random.Random:
    rng = random.Random()
    version, internal, gauss = state
    rng.setstate((version, tuple(internal), gauss))
    return rng
