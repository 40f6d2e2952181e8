"""EvalResult: the verdict on one candidate, as the parent judged it."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

Status = Literal["passed", "compile_error", "runtime_error", "timeout", "wrong_shape", "wrong_answer", "forbidden"]
STATUSES: tuple[str, ...] = (
    "passed", "compile_error", "runtime_error", "timeout", "wrong_shape", "wrong_answer", "forbidden",
)
#: The aggregate caps each workload's speedup so that one absurd figure cannot carry a geometric mean.
MAX_SPEEDUP = 1e4


@dataclass
class WorkloadResult:
    name: str
    split: str = "search"
    status: str = "passed"
    latency_s: float | None = None
    latency_spread: float | None = None  # (p75 - p25) / median
    baseline_latency_s: float | None = None
    speedup: float | None = None
    max_abs_err: float | None = None
    max_rel_err: float | None = None
    roofline_fraction: float | None = None
    #: "worker" (finer, checked against the parent clock), "parent", "cycle" (work moved between calls added back),
    #: "mean" (calls of two kinds: timing.BIMODAL) or "run" (work moved between the calls of a run: timing.RUN_BOUND)
    timing_source: str | None = None
    #: How the timed calls ran: calls per run, and the median time between calls per call of a run (the harness's own
    #: work: the next run's stamps, the last run's fingerprints), the candidate's and the baseline's (timing.combine
    #: compares the two).
    timing_run: int | None = None
    between_calls_s: float | None = None
    baseline_between_calls_s: float | None = None
    baseline_timing_run: int | None = None
    message: str = ""


@dataclass
class EvalResult:
    status: str
    message: str = ""
    task: str = ""
    backend: str = ""
    baseline: str = ""
    score: float = 0.0
    holdout_score: float | None = None
    workloads: list[WorkloadResult] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    seeds: dict[str, list[int]] = field(default_factory=dict)
    environment: dict[str, Any] = field(default_factory=dict)
    duration_s: float = 0.0
    #: Empty on a real device; on an emulated one (mlx-metal-emu) what its times are: the emulator's, so that no
    #: latency or speedup of this result is read as the emulated device's.
    timing: str = ""

    @property
    def passed(self) -> bool:
        return self.status == "passed"

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> EvalResult:
        data = dict(data)
        data["workloads"] = [WorkloadResult(**w) for w in data.get("workloads", [])]
        return cls(**data)

    def search_score(self) -> float | None:
        """The score, or None where the evaluation ran no search workload (`--workloads` naming holdout workloads
        alone): a geometric mean of no speedups measures nothing, and the 0 it is stored as would read as a verdict."""
        return self.score if any(w.split == "search" for w in self.workloads) else None

    def speedups(self, split: str = "search") -> list[float]:
        return [w.speedup for w in self.workloads if w.split == split and w.speedup is not None]

    def search_score_again(self) -> float | None:
        """A holdout evaluation's score on the search workloads, which it times again beside the holdout ones; None
        where it did not pass or has none. A search's best score is the highest of its measurements, so it leans high
        by about the harness's spread (0.966 against 0.887 timed again in an attention search on an H100,
        docs/search.md); this one does not."""
        again = self.speedups("search")
        return geomean(again) if self.passed and again else None


def geomean(values: list[float]) -> float:
    if not values or any(v <= 0 or not math.isfinite(v) for v in values):
        return 0.0
    capped = [min(v, MAX_SPEEDUP) for v in values]
    return math.exp(sum(math.log(v) for v in capped) / len(capped))
