"""`ksearch bench fidelity` and `ksearch bench eval-phases`: how well, and how fast, the harness measures (the suites:
ksearch.bench.fidelity, ksearch.bench.phases)."""

from __future__ import annotations

from typing import Annotated

import typer

from ksearch.cli.console import say
from ksearch.cli.out_dir import check_out_dir


def fidelity_cmd(
    backend: Annotated[str | None, typer.Option(help="Backend (default: the best here).")] = None,
    tasks: Annotated[str | None, typer.Option(help="Comma-separated task names (default: all built-in).")] = None,
    workloads: Annotated[int | None, typer.Option(help="At most this many search workloads per task.")] = None,
    out: Annotated[str, typer.Option(help="Directory for the JSON result.")] = "benchmarks/results",
    processes: Annotated[int, typer.Option(help="N >= 2: N harness evaluations and N + 1 plain-loop measurements, "
                                                "each plain one in a fresh process (0: the plain loop here).")] = 0,
    null: Annotated[bool, typer.Option("--null", help="The candidate as the baseline too: the harness's speedup "
                                                      "should then be 1.0 (its two workers' differences).")] = False,
) -> None:
    """Harness latency against a plain side-by-side loop, for each task's library kernel (or starter) and baseline;
    writes fidelity-BACKEND-DEVICE.json under --out."""
    from ksearch.bench.fidelity import run_fidelity

    def show(row: dict) -> None:
        def f(x: float | None) -> str:
            return f"{x:.3f}" if x is not None else "-"

        say(f"{row['task']:24s} {row['workload']:36s} {row['status']:12s} candidate ({row['candidate']}) "
            f"{f(row.get('candidate_ratio'))}  baseline ({row['baseline']}) {f(row.get('baseline_ratio'))}  "
            f"speedup {f(row.get('harness_speedup'))} against {f(row.get('plain_speedup'))}")

    names = [t.strip() for t in tasks.split(",")] if tasks else None
    check_out_dir(out)
    path = run_fidelity(backend, names, out, workloads, on_row=show, processes=processes, null=null)
    say(f"wrote {path}")


def phases_cmd(
    task: Annotated[str, typer.Argument(help="Task name or file.")],
    candidates: Annotated[list[str] | None, typer.Argument(help="Candidate files (default: the task's starter).")]
    = None,
    backend: Annotated[str | None, typer.Option(help="Backend (default: the best here).")] = None,
    workloads: Annotated[str | None, typer.Option(help="Comma-separated workload names.")] = None,
    repeat: Annotated[int, typer.Option(help="Evaluations of each candidate, one evaluator for all.")] = 2,
    out: Annotated[str | None, typer.Option(help="Directory for a JSON result (none: print only).")] = None,
) -> None:
    """Seconds per phase of evaluations judged in turn by one evaluator, as a search judges them (the first one
    starts the reference worker and times the baselines)."""
    from ksearch.bench.phases import run_phases

    names = [w.strip() for w in workloads.split(",")] if workloads else None
    if out is not None:
        check_out_dir(out)
    path = run_phases(task, backend, candidates or [], names, repeat, out, echo=say)
    if path:
        say(f"wrote {path}")


def register(bench_app: typer.Typer) -> None:
    bench_app.command("fidelity")(fidelity_cmd)
    bench_app.command("eval-phases")(phases_cmd)
