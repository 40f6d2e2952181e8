"""`ksearch bench naive`: the built-in starting candidate of every task, judged by the harness, as one JSON result
(the suite: ksearch.bench.naive)."""

from __future__ import annotations

from typing import Annotated

import typer

from ksearch.cli.console import console, say
from ksearch.cli.out_dir import check_out_dir


def naive_cmd(
    backend: Annotated[str | None, typer.Option(help="Backend (default: the best here).")] = None,
    tasks: Annotated[str | None, typer.Option(help="Comma-separated task names (default: all built-in).")] = None,
    out: Annotated[str, typer.Option(help="Directory for the JSON result.")] = "benchmarks/results",
    timeout: Annotated[float | None, typer.Option(help="Per-task evaluation limit (s).")] = None,
) -> None:
    """Judge every task's naive starting candidate and write benchmarks/results/naive-BACKEND-DEVICE.json."""
    from ksearch.bench.naive import run_naive
    from ksearch.report.tables import eval_table

    names = [t.strip() for t in tasks.split(",")] if tasks else None
    check_out_dir(out)
    path = run_naive(backend, names, out, timeout, on_result=lambda r: console.print(eval_table(r)))
    say(f"wrote {path}")


def register(bench_app: typer.Typer) -> None:
    bench_app.command("naive")(naive_cmd)
