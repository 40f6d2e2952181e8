"""The suite behind `ksearch bench search-summary RUN`: a finished search as one JSON result (trajectory, best,
holdout)."""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path
from typing import Any


def summarise_run(run: str, runs_dir: str | None = None, out: str | Path = "benchmarks/results") -> Path:
    """The run's evaluations in the benchmark schema; returns the path written. Raises store.RunNotFound or store.RunUnreadable."""
    from ksearch.backends import get_backend
    from ksearch.bench.results import make_result, write_result
    from ksearch.harness.result import EvalResult
    from ksearch.store import read_run, resolve_run

    recs = read_run(resolve_run(run, runs_dir))
    meta = recs.meta.values
    evals = [asdict(e) for e in recs.evaluations_of("search")]
    cands = {c.id: c for c in recs.candidates}
    best = 0.0
    figures: list[dict[str, Any]] = []
    for e in evals:
        best = max(best, e["score"] if e["status"] == "passed" else 0.0)
        cand = cands[e["candidate_id"]]
        figures.append({"evaluation": e["eval_index"], "candidate": e["candidate_id"], "status": e["status"],
                        "score": e["score"], "best_so_far": best, "mode": cand.mode, "action": cand.action_title,
                        "params": cand.params, "duration_s": e["duration_s"]})
    best_row = next((e for e in reversed(evals) if e["candidate_id"] == meta.get("best_candidate")), None)
    start = evals[0]["score"] if evals else 0.0
    holdout = meta.get("holdout") or {}
    held = recs.evaluations_of("holdout")
    data = make_result(f"search-{meta.get('task_name')}-{meta.get('strategy')}-{meta.get('policy')}",
                       get_backend(meta.get("backend")), figures,
                       shapes=[w["name"] for w in ((best_row or {}).get("result") or {}).get("workloads", [])],
                       dtypes=[], summary={
                           "run": recs.path.name, "budget": meta.get("budget"),
                           "evaluations_done": meta.get("evaluations_done"), "start_score": start,
                           "best_score": meta.get("best_score"), "best_candidate": meta.get("best_candidate"),
                           # the run's result (search/run_end.py) and the candidate its holdout judged
                           "chosen_candidate": meta.get("chosen_candidate") or meta.get("best_candidate"),
                           "holdout_candidate": held[-1].candidate_id if held else None,
                           # the holdout candidate's search workloads timed again (the best's, unless picked)
                           "best_score_again": EvalResult.from_json(holdout).search_score_again() if holdout
                           else None,
                           "holdout_score": holdout.get("holdout_score"),
                           "baseline": ((best_row or {}).get("result") or {}).get("baseline"),
                           "best_workloads": ((best_row or {}).get("result") or {}).get("workloads")},
                       notes="scores are geometric-mean speedups over the task's default baseline")
    return write_result(data, out)
