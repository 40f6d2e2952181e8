"""`ksearch bench search-summary RUN`: a finished search as one JSON result (trajectory, best, holdout)."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from ksearch.cli.console import console


def summary_cmd(
    run: Annotated[str, typer.Argument(help="Run id or path.")],
    runs_dir: Annotated[str | None, typer.Option(help="Where runs live.")] = None,
    out: Annotated[str, typer.Option(help="Directory for the JSON result.")] = "benchmarks/results",
) -> None:
    """Summarise a search run in the project's benchmark schema."""
    from ksearch.backends import get_backend
    from ksearch.report.benchjson import make_result, write_result
    from ksearch.store import RunNotFound, RunStore, resolve_run

    try:
        store = RunStore(resolve_run(run, runs_dir))
    except RunNotFound as exc:
        console.print(f"[red]error:[/red] {exc}")
        raise typer.Exit(2) from exc
    meta = store.meta()
    evals = store.evaluations("search")
    best = 0.0
    figures: list[dict[str, Any]] = []
    for e in evals:
        best = max(best, e["score"] if e["status"] == "passed" else 0.0)
        cand = store.candidate(e["candidate_id"])
        figures.append({"evaluation": e["eval_index"], "candidate": e["candidate_id"], "status": e["status"],
                        "score": e["score"], "best_so_far": best, "mode": cand.mode, "action": cand.action_title,
                        "params": cand.params, "duration_s": e["duration_s"]})
    best_row = next((e for e in reversed(evals) if e["candidate_id"] == meta.get("best_candidate")), None)
    start = evals[0]["score"] if evals else 0.0
    holdout = meta.get("holdout") or {}
    data = make_result(f"search-{meta.get('task_name')}-{meta.get('strategy')}-{meta.get('policy')}",
                       get_backend(meta.get("backend")), figures,
                       shapes=[w["name"] for w in ((best_row or {}).get("result") or {}).get("workloads", [])],
                       dtypes=[], summary={
                           "run": store.path.name, "budget": meta.get("budget"),
                           "evaluations_done": meta.get("evaluations_done"), "start_score": start,
                           "best_score": meta.get("best_score"), "best_candidate": meta.get("best_candidate"),
                           "holdout_score": holdout.get("holdout_score"),
                           "baseline": ((best_row or {}).get("result") or {}).get("baseline"),
                           "best_workloads": ((best_row or {}).get("result") or {}).get("workloads")},
                       notes="scores are geometric-mean speedups over the task's default baseline")
    console.print(f"wrote {write_result(data, out)}")


def register(bench_app: typer.Typer) -> None:
    bench_app.command("search-summary")(summary_cmd)
