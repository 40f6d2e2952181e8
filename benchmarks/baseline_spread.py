"""How far one evaluator's baseline timing lies from the next evaluator's, timed in one process or as the median of N.

Every score of a search divides by its evaluator's baseline timing of each workload (harness/baselines.py), measured
once; on the H200 one process's timing of native gqa_decode at B 16, 32k was 15% above the next's (591 and 681 us, the
candidates' times unchanged), which moved a whole run's scores. `KSEARCH_BASELINE_PROCESSES=N` makes the harness take
the median of N fresh processes (timing.BASELINE_PROCESSES, one by default). This benchmark measures what that buys:
`--evaluators` fresh evaluators per setting of `--processes`, the settings taking turns evaluator by evaluator (so
drift hits all alike), and per task, workload and setting the timings' median, fastest, slowest and spread (slowest /
fastest).

    python benchmarks/baseline_spread.py [--backend B] [--tasks gqa_decode] [--evaluators 6] [--processes 1,3]
                                         [--out DIR]

Writes baseline-spread-BACKEND-DEVICE.json to DIR (default benchmarks/results).
"""

from __future__ import annotations

import argparse
import math
import statistics
import time
from typing import Any


def spread_rows(task: Any, backend: Any, evaluators: int, settings: list[int]) -> list[dict[str, Any]]:
    """One row per workload and setting: the baseline timings `evaluators` fresh evaluators measured."""
    from ksearch.harness import Evaluator

    workloads = task.select_workloads(backend.tier)
    name = task.default_baseline
    taken: dict[tuple[str, int], list[float]] = {(w.name, p): [] for w in workloads for p in settings}
    for _ in range(evaluators):
        for p in settings:
            with Evaluator(task, backend) as ev:
                ev.baselines.processes = p
                timings = ev.baselines.timings(name, workloads, time.monotonic() + 1800)
            for w in workloads:
                latency = timings[w.name].latency_s
                if latency is not None and math.isfinite(latency):
                    taken[(w.name, p)].append(latency)
    rows = []
    for (wname, p), ts in taken.items():
        if not ts:
            continue
        rows.append({"task": task.name, "workload": wname, "baseline": name, "processes": p, "evaluators": len(ts),
                     "latency_s": statistics.median(ts), "fastest_s": min(ts), "slowest_s": max(ts),
                     "spread": max(ts) / min(ts), "timings_s": ts})
    return rows


def main() -> None:
    from ksearch.backends import get_backend
    from ksearch.bench.results import make_result, write_result
    from ksearch.errors import UsageError
    from ksearch.tasks import get_task

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--backend", default=None)
    ap.add_argument("--tasks", default="gqa_decode")
    ap.add_argument("--evaluators", type=int, default=6, help="fresh evaluators per setting (2 at least)")
    ap.add_argument("--processes", default="1,3", help="settings of processes per baseline timing, e.g. 1,3")
    ap.add_argument("--out", default="benchmarks/results")
    args = ap.parse_args()
    try:
        settings = [int(p) for p in args.processes.split(",")]
    except ValueError:
        raise SystemExit(f"baseline_spread: --processes {args.processes!r}: give integers, e.g. 1,3") from None
    if not settings or min(settings) < 1 or max(settings) > 9:
        raise SystemExit(f"baseline_spread: --processes {args.processes!r}: each setting 1 to 9")
    if args.evaluators < 2:
        raise SystemExit(f"baseline_spread: --evaluators {args.evaluators}: 2 at least (a spread needs two)")
    try:
        backend = get_backend(args.backend)
        tasks = [get_task(t) for t in args.tasks.split(",")]
    except UsageError as exc:
        raise SystemExit(f"baseline_spread: {exc}") from None
    figures: list[dict[str, Any]] = []
    for task in tasks:
        for r in spread_rows(task, backend, args.evaluators, settings):
            print(f"{r['task']:12s} {r['workload']:22s} processes {r['processes']}: median "
                  f"{r['latency_s'] * 1e6:9.1f} us, {r['fastest_s'] * 1e6:9.1f}-{r['slowest_s'] * 1e6:9.1f} us, "
                  f"spread x{r['spread']:.3f} over {r['evaluators']} evaluators", flush=True)
            figures.append(r)
    summary = {str(p): {"worst_spread": max((f["spread"] for f in figures if f["processes"] == p), default=None)}
               for p in settings}
    result = make_result("baseline-spread", backend, figures, shapes=[], dtypes=[], summary=summary,
                         notes="fresh evaluators' baseline timings; spread = slowest / fastest")
    print(write_result(result, args.out))


if __name__ == "__main__":
    main()
