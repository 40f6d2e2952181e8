"""`make demo`: a short offline K-Search on the best local backend, no network, ending with the summary table."""

from __future__ import annotations

from rich.console import Console

from ksearch.backends import Backend
from ksearch.cli.live import LiveView, final_table
from ksearch.config import RunConfig
from ksearch.search.start import start_run

#: The scan gives the offline proposer the most room on every backend: the naive start walks L token by token.
DEMO_TASK = "selective_scan"


def run_demo(backend: Backend, budget: int, console: Console, runs_dir: str = "runs", quiet: bool = False,
             task: str = DEMO_TASK) -> None:
    cfg = RunConfig(task=task, backend=backend.name, policy="offline", strategy="ksearch", budget=budget,
                    runs_dir=runs_dir, seed=0)
    with LiveView(enabled=not quiet) as view:
        outcome = start_run(cfg, on_event=view)
    console.print(final_table(outcome))
    console.print(f"next: ksearch report {outcome.path}  (see README: reports, export, compare)")
