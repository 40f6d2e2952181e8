"""`make demo`: judge the built-in starting candidate of every task on the best local backend."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from ksearch.backends import Backend
from ksearch.harness import Evaluator
from ksearch.report.tables import fmt_time, fmt_x
from ksearch.tasks import all_tasks


def run_demo(backend: Backend, budget: int, console: Console) -> None:
    table = Table(title=f"starting candidates on {backend.name}")
    for col in ("task", "status", "score", "baseline", "workloads", "median latency"):
        table.add_column(col)
    for task in all_tasks():
        with Evaluator(task, backend) as ev:
            r = ev.evaluate(task.starting_source(backend.family))
        lat = sorted(w.latency_s for w in r.workloads if w.latency_s)
        table.add_row(task.name, r.status, fmt_x(r.score), r.baseline, str(len(r.workloads)),
                      fmt_time(lat[len(lat) // 2] if lat else None))
    console.print(table)
