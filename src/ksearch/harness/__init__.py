"""How a candidate is judged: isolated workers, a trusted reference and baseline, the parent's own clock.

The judging API is imported on first use: a worker process imports this package too (for its channel and timing
rules), and the evaluator's imports (backends, the linter) cost a second or more of every worker's start."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ksearch.backends import Backend
    from ksearch.harness.evaluate import EvalOptions, Evaluator
    from ksearch.harness.result import STATUSES, EvalResult, WorkloadResult, geomean
    from ksearch.tasks.base import Task

_LAZY = {"EvalOptions": "ksearch.harness.evaluate", "Evaluator": "ksearch.harness.evaluate",
         "STATUSES": "ksearch.harness.result", "EvalResult": "ksearch.harness.result",
         "WorkloadResult": "ksearch.harness.result", "geomean": "ksearch.harness.result"}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'ksearch.harness' has no attribute {name!r}")


def evaluate(task: Task, source: str, backend: Backend, options: EvalOptions | None = None) -> EvalResult:
    """Judge one candidate (a fresh Evaluator: no state shared with other evaluations)."""
    from ksearch.harness.evaluate import EvalOptions, Evaluator

    with Evaluator(task, backend, (options or EvalOptions()).memory_limit_bytes) as ev:
        return ev.evaluate(source, options)


__all__ = ["STATUSES", "EvalOptions", "EvalResult", "Evaluator", "WorkloadResult", "evaluate", "geomean"]
