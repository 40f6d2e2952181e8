"""The suite behind `ksearch bench eval-phases` (and benchmarks/eval_phases.py): where an evaluation's time goes.

Candidates are judged in turn by one Evaluator, each `repeat` times, as a search judges them: the first evaluation
also starts the trusted reference worker and times the baselines; later ones reuse both (and the references of the
trial seeds). Each evaluation's phases (Evaluator.phases) are printed and, with `out`, written as one JSON result.
"first trial" is the candidate's first call, which holds its JIT compiles; each later workload's first call compiles
for its own shapes and dtypes. `excluding_compile_s` is the evaluation less what each workload's first call took
beyond its next (the evaluator's estimate, phase part COMPILES).
"""

from __future__ import annotations

import functools
import os
import platform
import statistics
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any


def _cpu() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _phase_order(phases: dict[str, float], item: tuple[str, float]) -> tuple[float, str, bool, float]:
    """Longest phase first, each one's parts ("phase > part") beneath it."""
    top = item[0].split(" > ")[0]
    return -phases.get(top, 0.0), top, item[0] != top, -item[1]


def run_phases(task_name: str, backend: str | None, candidates: list[str], workloads: list[str] | None = None,
               repeat: int = 2, out: str | Path | None = None,
               echo: Callable[[str], Any] = print) -> Path | None:
    from ksearch.backends import get_backend
    from ksearch.bench.results import make_result, write_result
    from ksearch.harness import EvalOptions, Evaluator
    from ksearch.harness.evaluator import COMPILES
    from ksearch.tasks import get_task

    task = get_task(task_name)
    b = get_backend(backend)
    sources = [(Path(c).name, Path(c).read_text()) for c in candidates] or [
        ("starter", task.starting_source(b.family))]
    figures: list[dict[str, Any]] = []
    with Evaluator(task, b, spare=True) as ev:  # as a search judges them: the next worker spawned ahead
        for name, source in sources:
            for k in range(repeat):
                t0 = time.perf_counter()
                result = ev.evaluate(source, EvalOptions(workloads=workloads))
                total = time.perf_counter() - t0
                phases = {p: round(s, 4) for p, s in ev.phases.items()}
                compile_s = ev.phases.get(COMPILES)
                if compile_s is None:  # no workload reached its second trial: the first call against the rest
                    trials = ev.phases.get("trials", 0.0)
                    n_trials = max(1, sum(1 for _ in result.workloads) * 3 - 1)
                    compile_s = max(0.0, ev.phases.get("first trial", 0.0) - trials / n_trials)
                row = {"candidate": name, "evaluation": k + 1, "status": result.status, "score": result.score,
                       "total_s": round(total, 4), "excluding_compile_s": round(total - compile_s, 4),
                       "phases_s": phases, "workloads": [w.name for w in result.workloads]}
                figures.append(row)
                echo(f"== {name} #{k + 1}: {result.status} score={result.score:.4g} total={total:.2f}s "
                     f"excluding compiles={total - compile_s:.2f}s {(result.message or '')[:200]}")
                width = max(map(len, phases), default=0)
                for phase, secs in sorted(phases.items(), key=functools.partial(_phase_order, phases)):
                    echo(f"   {phase:{width}s} {secs:8.3f}s")
    if out is None:
        return None
    later = [f["excluding_compile_s"] for f in figures if f["evaluation"] > 1]
    summary = {"first_total_s": figures[0]["total_s"],
               "later_median_s": statistics.median(later) if later else None,
               "cpu": _cpu(), "cpu_count": os.cpu_count(), "load_average_1m": os.getloadavg()[0]}
    wl = workloads or [w.name for w in task.select_workloads(b.tier)]
    shapes = [{"task": task.name, "workload": n, **dict(task.workload(n).axes)} for n in wl]
    data = make_result(f"eval-phases-{task.name}", b, figures, shapes, sorted({task.workload(n).dtype for n in wl}),
                       summary=summary, notes="seconds per phase of each evaluation, one evaluator for all")
    return write_result(data, out)
