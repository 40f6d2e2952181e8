"""Evaluations per hour of the offline K-Search on the CPU with 1 and with 2 evaluators (`--workers`; the second on
a local Ray instance), same task, seed and budget, one run after the other.

    python benchmarks/parallel_throughput.py [--task softmax] [--budget 8] [--seed 1] [--workers 1 2]
                                             [--out benchmarks/results] [--runs-dir DIR]

The rate counts the evaluations after the starting kernel over the time from its verdict to the last verdict (so
neither the start of the evaluators nor the final holdout is in it); the whole run's wall time is reported too.
Writes `parallel-throughput-cpu-mlx-cpu-<device>.json` (schema ksearch-bench/1). On a machine whose cores are busy
with other work the 2-worker figure is what two evaluators share, not twice one.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path
from typing import Any

from ksearch.backends import get_backend
from ksearch.bench.results import make_result, write_result
from ksearch.config import RunConfig
from ksearch.search.start import start_run
from ksearch.store import read_run


def measure(task: str, budget: int, seed: int, workers: int, runs_dir: str) -> dict[str, Any]:
    cfg = RunConfig(task=task, backend="mlx-cpu", budget=budget, seed=seed, workers=workers, runs_dir=runs_dir)
    t0 = time.time()
    out = start_run(cfg)
    wall = time.time() - t0
    evals = read_run(out.path).evaluations_of("search")
    span = evals[-1].created_at - evals[0].created_at if len(evals) > 1 else 0.0
    rate = (len(evals) - 1) / span * 3600 if span > 0 else None
    return {"workers": workers, "evaluations": len(evals), "seconds_after_start": round(span, 2),
            "evaluations_per_hour": round(rate, 1) if rate else None, "run_wall_s": round(wall, 2),
            "status": out.status, "stop_kind": out.stop_kind, "best_score": round(out.state.best_score, 4),
            "run": out.path.name}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--task", default="softmax")
    ap.add_argument("--budget", type=int, default=8)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--out", default="benchmarks/results")
    ap.add_argument("--runs-dir", default=None)
    args = ap.parse_args()
    runs_dir = args.runs_dir or tempfile.mkdtemp(prefix="ksearch-parallel-")
    rows = []
    for n in args.workers:
        rows.append(measure(args.task, args.budget, args.seed, n, runs_dir))
        print(rows[-1], flush=True)
    base = next((r["evaluations_per_hour"] for r in rows if r["workers"] == 1), None)
    summary = {f"evaluations_per_hour_{r['workers']}w": r["evaluations_per_hour"] for r in rows}
    if base:
        summary.update({f"ratio_{r['workers']}w_over_1w": round(r["evaluations_per_hour"] / base, 3)
                        for r in rows if r["workers"] != 1 and r["evaluations_per_hour"]})
    summary["cpu_count"] = os.cpu_count()
    notes = (f"offline K-Search, task {args.task}, seed {args.seed}, budget {args.budget}; runs one after the other "
             "on a shared machine; the rate excludes evaluator start-up and the holdout")
    data = make_result("parallel-throughput-cpu", get_backend("mlx-cpu"), rows, [args.task], ["float32", "float16"],
                       summary, notes)
    print(write_result(data, Path(args.out)))


if __name__ == "__main__":
    main()
