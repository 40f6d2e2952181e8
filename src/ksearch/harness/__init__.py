"""How a candidate is judged: isolated workers, a trusted reference and baseline, the parent's own clock."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ksearch.backends import Backend
    from ksearch.harness.evaluator import EvalOptions, Evaluator
    from ksearch.harness.result import STATUSES, EvalResult, WorkloadResult, geomean
    from ksearch.tasks.base import Task

# Every worker process imports this package too (python -m ksearch.harness.worker): the evaluator's modules (the
# static check, the knowledge base, psutil, the sandbox) load on first use only, which took a third of a second off
# every worker's start on the 2-core CPU.
_LAZY = {"EvalOptions": "evaluator", "Evaluator": "evaluator", "STATUSES": "result", "EvalResult": "result",
         "WorkloadResult": "result", "geomean": "result"}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(f"ksearch.harness.{_LAZY[name]}"), name)
    raise AttributeError(f"module 'ksearch.harness' has no attribute {name!r}")


def evaluate(task: Task, source: str, backend: Backend, options: EvalOptions | None = None) -> EvalResult:
    """Judge one candidate (a fresh Evaluator: no state shared with other evaluations)."""
    from ksearch.harness.evaluator import EvalOptions, Evaluator

    with Evaluator(task, backend, (options or EvalOptions()).memory_limit_bytes) as ev:
        return ev.evaluate(source, options)


__all__ = ["STATUSES", "EvalOptions", "EvalResult", "Evaluator", "WorkloadResult", "evaluate", "geomean"]
