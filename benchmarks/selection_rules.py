"""The frontier selection rules, measured with the offline proposer on the CPU: the weighted priority V (the default,
exploration weight 0.5), the same with a lower exploration weight, and the published K-Search ordering (difficulty
cut-off, then score, difficulty, rating). Per task and seed, one run per rule, one run at a time: the evaluations it
took to reach 95% of its own final best, and that final best.

    python benchmarks/selection_rules.py [--tasks selective_scan softmax gqa_decode] [--seeds 1 2 3 4 5]
                                         [--budget 40] [--rules weighted weighted-explore-0.2 published]
                                         [--out benchmarks/results]

Writes `selection-rules-cpu-mlx-cpu-<device>.json` (schema ksearch-bench/1). Fewer seeds or a smaller budget than
the defaults mark the result `reduced` in its summary and notes.
"""

from __future__ import annotations

import argparse
import math
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from ksearch.backends import get_backend
from ksearch.bench.results import make_result, write_result
from ksearch.config import RunConfig, SelectionWeights
from ksearch.search.start import start_run
from ksearch.store import read_run

RULES: dict[str, SelectionWeights] = {
    "weighted": SelectionWeights(),
    "weighted-explore-0.2": SelectionWeights(exploration=0.2),
    "published": SelectionWeights(rule="published"),
}
TASKS = ("selective_scan", "softmax", "gqa_decode")
SEEDS = (1, 2, 3, 4, 5)
BUDGET = 40
TIE = 0.03  # final bests within 3% are a tie: separate-process timings on a shared 2-core machine move that much


def one_run(task: str, seed: int, rule: str, budget: int, runs_dir: Path) -> dict[str, Any]:
    cfg = RunConfig(task=task, backend="mlx-cpu", budget=budget, seed=seed, runs_dir=str(runs_dir),
                    weights=RULES[rule])
    t0 = time.monotonic()
    out = start_run(cfg)
    wall = time.monotonic() - t0
    recs = read_run(out.path)
    scores = [e.score if e.status == "passed" else 0.0 for e in recs.evaluations_of("search")]
    best, best_so_far = 0.0, []
    for s in scores:
        best = max(best, s)
        best_so_far.append(round(best, 4))
    final = best_so_far[-1] if best_so_far else 0.0
    to95 = next((i + 1 for i, b in enumerate(best_so_far) if b >= 0.95 * final), None) if final > 0 else None
    reasons: dict[str, int] = {}
    for e in recs.events:
        if e.kind == "cycle_end":
            key = str(e.data.get("reason") or "?")
            reasons[key] = reasons.get(key, 0) + 1
    holdout = recs.meta.holdout or {}
    return {"task": task, "seed": seed, "rule": rule, "budget": budget, "evaluations": len(scores),
            "final_best": final, "start_score": scores[0] if scores else None,
            "evaluations_to_95pct": to95, "best_so_far": best_so_far, "cycles": sum(reasons.values()),
            "cycle_end_reasons": reasons, "stop_kind": out.stop_kind,
            "holdout_score": holdout.get("holdout_score", holdout.get("score")), "wall_s": round(wall, 1)}


def summarise(rows: list[dict[str, Any]], rules: list[str]) -> dict[str, Any]:
    """Per rule: mean evaluations to 95% and mean final best per task; against the weighted rule, paired by task and
    seed: the geometric mean of the final-best ratio, and wins / ties / losses (a tie within TIE)."""
    out: dict[str, Any] = {}
    by = {(r["task"], r["seed"], r["rule"]): r for r in rows}
    for rule in rules:
        mine = [r for r in rows if r["rule"] == rule]
        tasks = sorted({r["task"] for r in mine})
        entry: dict[str, Any] = {"per_task": {}}
        for task in tasks:
            rs = [r for r in mine if r["task"] == task]
            reached = [r["evaluations_to_95pct"] for r in rs if r["evaluations_to_95pct"] is not None]
            entry["per_task"][task] = {
                "runs": len(rs),
                "mean_evaluations_to_95pct": round(statistics.fmean(reached), 2) if reached else None,
                "median_evaluations_to_95pct": statistics.median(reached) if reached else None,
                "mean_final_best": round(statistics.fmean(r["final_best"] for r in rs), 4),
                "min_final_best": round(min(r["final_best"] for r in rs), 4),
            }
        if rule != "weighted":
            pairs = [(r, by.get((r["task"], r["seed"], "weighted"))) for r in mine]
            pairs = [(r, w) for r, w in pairs if w is not None and w["final_best"] > 0 and r["final_best"] > 0]
            if pairs:
                ratios = [r["final_best"] / w["final_best"] for r, w in pairs]
                entry["vs_weighted"] = {
                    "pairs": len(pairs),
                    "geomean_final_best_ratio": round(math.exp(statistics.fmean(math.log(x) for x in ratios)), 4),
                    "wins": sum(1 for x in ratios if x > 1 + TIE), "ties": sum(1 for x in ratios if abs(x - 1) <= TIE),
                    "losses": sum(1 for x in ratios if x < 1 - TIE),
                    "mean_evaluations_to_95pct_difference": round(statistics.fmean(
                        r["evaluations_to_95pct"] - w["evaluations_to_95pct"] for r, w in pairs
                        if r["evaluations_to_95pct"] is not None and w["evaluations_to_95pct"] is not None), 2),
                }
        out[rule] = entry
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tasks", nargs="+", default=list(TASKS))
    ap.add_argument("--seeds", nargs="+", type=int, default=list(SEEDS))
    ap.add_argument("--budget", type=int, default=BUDGET)
    ap.add_argument("--rules", nargs="+", default=list(RULES), choices=list(RULES))
    ap.add_argument("--out", default="benchmarks/results")
    ap.add_argument("--runs-dir", default=None, help="keep the runs here (default: a temporary directory)")
    args = ap.parse_args()
    rows: list[dict[str, Any]] = []
    planned = [(seed, task, rule) for seed in args.seeds for task in args.tasks for rule in args.rules]
    with tempfile.TemporaryDirectory(prefix="ksearch-selection-") as tmp:
        runs = Path(args.runs_dir or tmp)
        # Seeds outermost, and the result written after every run: a comparison cut short still holds whole seeds.
        for seed, task, rule in planned:
            row = one_run(task, seed, rule, args.budget, runs)
            rows.append(row)
            print(f"{task:15s} seed {seed} {rule:22s} final {row['final_best']:.3f} "
                  f"to95 {row['evaluations_to_95pct']} evals {row['evaluations']} "
                  f"cycles {row['cycles']} {row['cycle_end_reasons']} {row['wall_s']} s", flush=True)
            path = write(rows, args, len(rows) == len(planned))
    print(path)


def write(rows: list[dict[str, Any]], args: argparse.Namespace, complete: bool) -> Path:
    seeds = sorted({r["seed"] for r in rows})
    tasks = [t for t in args.tasks if any(r["task"] == t for r in rows)]
    reduced = len(seeds) < len(SEEDS) or args.budget < BUDGET or set(tasks) != set(TASKS) or not complete
    summary = {"reduced": reduced, "complete": complete, "rules": {k: RULES[k].__dict__ for k in args.rules},
               "tasks": tasks, "seeds": seeds, "budget": args.budget, **summarise(rows, args.rules)}
    notes = (f"Offline proposer, mlx-cpu, budget {args.budget}, seeds {seeds}, tasks {tasks}; one run at a time on a "
             "shared 2-core CPU. evaluations_to_95pct: the evaluation (1 = the starting kernel) at which the run's "
             "best first reached 95% of its final best.")
    if reduced:
        notes += (" REDUCED: fewer seeds, tasks or evaluations than the full comparison (selective_scan, softmax, "
                  f"gqa_decode; seeds {list(SEEDS)}; budget {BUDGET}); too little data to choose a default.")
    result = make_result("selection-rules-cpu", get_backend("mlx-cpu"), rows,
                         [f"{t} cpu search workloads" for t in tasks], ["float32", "float16"], summary, notes)
    return write_result(result, args.out)


if __name__ == "__main__":
    main()
