"""`ksearch bench search-summary RUN`: a finished search as one JSON result (trajectory, best, holdout)
(the suite: ksearch.bench.search_summary)."""

from __future__ import annotations

from typing import Annotated

import typer

from ksearch.cli.console import fail, say
from ksearch.cli.out_dir import check_out_dir


def summary_cmd(
    run: Annotated[str, typer.Argument(help="Run id or path.")],
    runs_dir: Annotated[str | None, typer.Option(help="Where runs live.")] = None,
    out: Annotated[str, typer.Option(help="Directory for the JSON result.")] = "benchmarks/results",
) -> None:
    """Summarise a search run in the project's benchmark schema."""
    from ksearch.bench.search_summary import summarise_run
    from ksearch.store import RunNotFound, RunUnreadable

    check_out_dir(out)
    try:
        path = summarise_run(run, runs_dir, out)
    except (RunNotFound, RunUnreadable) as exc:
        fail(str(exc))  # one line on stderr, exit 2, as every command's bad input
    say(f"wrote {path}")


def register(bench_app: typer.Typer) -> None:
    bench_app.command("search-summary")(summary_cmd)
