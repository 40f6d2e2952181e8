"""`ksearch bench ...`: a command group; each benchmark lives in its own module with register(bench_app)."""

from __future__ import annotations

import importlib
import importlib.util

import typer

BENCH_MODULES = ("ksearch.cli.commands.bench_mamba", "ksearch.cli.commands.bench_attention",
                 "ksearch.cli.commands.bench_naive", "ksearch.cli.commands.bench_search",
                 "ksearch.cli.commands.bench_harness")


def register(app: typer.Typer) -> None:
    bench_app = typer.Typer(no_args_is_help=True, rich_markup_mode="markdown",
                            help="Benchmarks: ours vs baselines side by side, JSON results.")
    for name in BENCH_MODULES:
        if importlib.util.find_spec(name) is not None:
            importlib.import_module(name).register(bench_app)
    app.add_typer(bench_app, name="bench")
