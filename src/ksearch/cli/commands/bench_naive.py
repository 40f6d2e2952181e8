"""`ksearch bench naive`: the built-in starting candidate of every task, judged by the harness, as one JSON result."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from ksearch.cli.console import console


def naive_cmd(
    backend: Annotated[str | None, typer.Option(help="Backend (default: the best here).")] = None,
    tasks: Annotated[str | None, typer.Option(help="Comma-separated task names (default: all built-in).")] = None,
    out: Annotated[str, typer.Option(help="Directory for the JSON result.")] = "benchmarks/results",
    timeout: Annotated[float | None, typer.Option(help="Per-task evaluation limit (s).")] = None,
) -> None:
    """Judge every task's naive starting candidate and write benchmarks/results/naive-<backend>-<device>.json."""
    from ksearch.backends import get_backend
    from ksearch.harness import EvalOptions, Evaluator
    from ksearch.report.benchjson import make_result, write_result
    from ksearch.report.tables import eval_table
    from ksearch.tasks import all_tasks, get_task

    b = get_backend(backend)
    chosen = [get_task(t.strip()) for t in tasks.split(",")] if tasks else all_tasks()
    figures: list[dict[str, Any]] = []
    shapes, dtypes = [], set()
    for task in chosen:
        with Evaluator(task, b) as ev:
            r = ev.evaluate(task.starting_source(b.family), EvalOptions(timeout_s=timeout))
        console.print(eval_table(r))
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
    console.print(f"wrote {write_result(data, out)}")


def register(bench_app: typer.Typer) -> None:
    bench_app.command("naive")(naive_cmd)
