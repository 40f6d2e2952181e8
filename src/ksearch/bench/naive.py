"""The suite behind `ksearch bench naive`: every task's built-in starting candidate, judged by the harness, as one
JSON result."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ksearch.harness import EvalResult


def run_naive(backend: str | None = None, tasks: list[str] | None = None, out: str | Path = "benchmarks/results",
              timeout: float | None = None, on_result: Callable[[EvalResult], None] = lambda _r: None) -> Path:
    """Judge each task's naive starter on `backend` (default: the best here), all built-in tasks unless `tasks`
    names some; on_result sees each verdict as it comes. Writes naive-<backend>-<device>.json, returns its path."""
    from ksearch.backends import get_backend
    from ksearch.bench.results import make_result, write_result
    from ksearch.harness import EvalOptions, Evaluator
    from ksearch.tasks import all_tasks, get_task

    b = get_backend(backend)
    chosen = [get_task(t) for t in tasks] if tasks else all_tasks()
    figures: list[dict[str, Any]] = []
    shapes, dtypes = [], set()
    for task in chosen:
        with Evaluator(task, b) as ev:
            r = ev.evaluate(task.starting_source(b.family), EvalOptions(timeout_s=timeout))
        on_result(r)
        for w in r.workloads:
            wl = task.workload(w.name)
            shapes.append({"task": task.name, "workload": w.name, **dict(wl.axes), **dict(wl.params)})
            dtypes.add(wl.dtype)
            figures.append({"task": task.name, "workload": w.name, "status": r.status, "baseline": r.baseline,
                            "latency_s": w.latency_s, "baseline_latency_s": w.baseline_latency_s,
                            "speedup": w.speedup, "roofline_fraction": w.roofline_fraction,
                            "max_abs_err": w.max_abs_err, "message": r.message[:300] if r.status != "passed" else ""})
    data = make_result("naive", b, figures, shapes, sorted(dtypes),
                       summary={"passed": sorted({f["task"] for f in figures if f["status"] == "passed"}),
                                "failed": sorted({f["task"] for f in figures if f["status"] != "passed"})},
                       notes="each task's built-in naive starting candidate through the isolated harness")
    return write_result(data, out)
