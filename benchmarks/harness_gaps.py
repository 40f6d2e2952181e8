"""The harness's timed batches taken apart: for one evaluation of a task's library kernel (or starter, as the fidelity
benchmark picks it) and the timing of its default baseline, every batch's run lengths, its runs' mean calls and the
time between calls per call of each run (the harness's own work: the next run's stamps, the last run's fingerprints
and commitments), as the parent received them, and the latency each workload was given with its source.

    python benchmarks/harness_gaps.py TASK [--backend B] [--out DIR]

Prints one line per batch; writes harness-gaps-TASK-BACKEND-DEVICE.json under --out when given. What it shows: whether
the run lengths were alike for the candidate and its baseline, and how the time between calls (which the gap bound,
timing.GAP_FACTOR, compares between the two) compares with the calls themselves.
"""

from __future__ import annotations

import argparse
import statistics
from typing import Any


def batches(task_name: str, backend: str | None) -> tuple[Any, list[dict[str, Any]], list[dict[str, Any]]]:
    import mlx.core as mx

    import ksearch.harness.baselines as baselines_module
    import ksearch.harness.evaluator as evaluator_module
    from ksearch.backends import get_backend
    from ksearch.bench.plain_loop import candidate_for
    from ksearch.harness import EvalOptions, Evaluator, measure, timing
    from ksearch.tasks import get_task

    task, b = get_task(task_name), get_backend(backend)
    if not b.is_gpu:
        mx.set_default_device(mx.cpu)
    rows: list[dict[str, Any]] = []
    timed_workload = measure.time_workload

    def recorded(worker: Any, task: Any, w: Any, plan: Any, deadline: float, check: bool, rng: Any = None) -> Any:
        t = timed_workload(worker, task, w, plan, deadline, check, rng)
        for k, bt in enumerate(t.batches):
            rows.append({"who": "candidate" if check else "baseline", "workload": w.name, "batch": k,
                         "probe": bt.probe, "calls": len(bt.times), "runs": bt.runs,
                         "run_means_s": timing.per_run(bt.times, bt.runs),
                         "gap_per_call_s": timing.per_run(bt.gaps, bt.runs), "elapsed_s": bt.elapsed})
        return t

    # The evaluator and the baselines call time_workload through their own module's name.
    evaluator_module.time_workload = recorded  # type: ignore[assignment]
    baselines_module.time_workload = recorded  # type: ignore[assignment]
    workloads = task.select_workloads(b.tier)
    _name, source = candidate_for(task, b, workloads)
    with Evaluator(task, b) as ev:
        result = ev.evaluate(source, EvalOptions(workloads=[w.name for w in workloads], lint=False))
    latencies = [{"workload": wr.name, "latency_s": wr.latency_s, "baseline_latency_s": wr.baseline_latency_s,
                  "source": wr.timing_source} for wr in result.workloads]
    return b, rows, latencies


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("task")
    ap.add_argument("--backend", default=None, help="backend (default: the best here)")
    ap.add_argument("--out", default=None, help="directory for the JSON (default: print only)")
    args = ap.parse_args()
    from ksearch.errors import UsageError

    try:
        b, rows, latencies = batches(args.task, args.backend)
    except UsageError as exc:  # an unknown task or backend: one line, not a traceback
        raise SystemExit(f"harness_gaps: {exc}") from None
    for r in rows:
        us = [round(x * 1e6) for x in r["run_means_s"][:6]]
        gap = [round(x * 1e6) for x in r["gap_per_call_s"][:6]]
        print(f"{r['who']:9s} {r['workload']:28s} batch {r['batch']} probe={r['probe']!s:5s} calls={r['calls']:4d} "
              f"runs={r['runs'][:6]} call_us={us} gap_per_call_us={gap}")
    for w in latencies:
        print(f"{w['workload']}: {w['latency_s']} s (baseline {w['baseline_latency_s']} s), source {w['source']}")
    for who in ("candidate", "baseline"):
        gaps = [g for r in rows if r["who"] == who and not r["probe"] for g in r["gap_per_call_s"]]
        if gaps:
            print(f"{who}: median time between calls per call {statistics.median(gaps) * 1e6:.0f} us")
    if args.out:
        from ksearch.bench.results import make_result, write_result

        data = make_result("harness-gaps", b, rows, [w["workload"] for w in latencies], [],
                           summary={"latencies": latencies}, notes="per timed batch: run lengths, runs' mean calls, "
                           "time between calls per call of each run")
        print("wrote", write_result(data, args.out, f"harness-gaps-{args.task}"))


if __name__ == "__main__":
    main()
