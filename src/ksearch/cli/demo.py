"""`make demo`: a short offline K-Search on the best local backend, no network, ending with the summary table and
its best few timed again (`ksearch confirm`)."""

from __future__ import annotations

import shlex
from pathlib import Path

from rich.console import Console

from ksearch.backends import Backend
from ksearch.cli.live import LiveView, final_table
from ksearch.config import RunConfig
from ksearch.report.tables import confirmation_table
from ksearch.search.start import start_run
from ksearch.store import runs_dir as runs_root

#: The scan gives the offline proposer the most room on every backend: the naive start walks L token by token.
DEMO_TASK = "selective_scan"


def run_demo(backend: Backend, budget: int, console: Console, runs_dir: str | None = None, quiet: bool = False,
             task: str = DEMO_TASK) -> None:
    """The demo's run, in `runs_dir` (None: where `ksearch run` writes, $KSEARCH_RUNS_DIR or runs/)."""
    cfg = RunConfig(task=task, backend=backend.name, policy="offline", strategy="ksearch", budget=budget,
                    runs_dir=str(runs_root(runs_dir)), seed=0)
    with LiveView(enabled=not quiet) as view:
        outcome = start_run(cfg, on_event=view)
    console.print(final_table(outcome))
    if outcome.confirmation is not None:  # its best 3 timed again twice each, as every finished run (RunConfig)
        console.print(confirmation_table(outcome.confirmation))
    console.print(next_step(outcome.path), markup=False, highlight=False, soft_wrap=True)  # never cut mid-path


def next_step(run: Path) -> str:
    """The line after the demo: the command to look at its run, pasteable as it is (a runs folder's path may hold
    spaces)."""
    return f"next: {shlex.join(['ksearch', 'report', str(run)])}  (see README: reports, export, compare)"
