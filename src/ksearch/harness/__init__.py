"""How a candidate is judged: isolated workers, a trusted reference and baseline, the parent's own clock."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ksearch.harness.evaluate import EvalOptions, Evaluator
from ksearch.harness.result import STATUSES, EvalResult, WorkloadResult, geomean

if TYPE_CHECKING:  # the worker processes import this package too: what they do not need stays out of their start
    from ksearch.backends import Backend
    from ksearch.tasks.base import Task


def evaluate(task: Task, source: str, backend: Backend, options: EvalOptions | None = None) -> EvalResult:
    """Judge one candidate (a fresh Evaluator: no state shared with other evaluations)."""
    with Evaluator(task, backend, (options or EvalOptions()).memory_limit_bytes) as ev:
        return ev.evaluate(source, options)


__all__ = ["STATUSES", "EvalOptions", "EvalResult", "Evaluator", "WorkloadResult", "evaluate", "geomean"]
