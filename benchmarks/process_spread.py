"""How far a short kernel's plain-loop time moves from one fresh process to the next: the floor under any comparison
of the harness (which times in worker processes of its own, new for every evaluation) with a plain loop.

Each of `--processes` fresh processes per mode measures every contender of every workload (the fidelity benchmark's
plain loop, bench/fidelity.plain_times: runs as long as the harness's, the same input sets) twice, one after the
other. Modes, taking turns process by process so that drift hits both alike:

    free     the process as the OS places it (as the harness's workers and the fidelity loop run)
    pinned   the process held to one CPU (`--cpu`, default the last this process may use), with every thread it starts

Per workload and contender: each process's median time per call, their spread (slowest / fastest process) per mode,
and the largest change between a process's two measurements (within a process). Where the free processes spread
wider than the pinned ones, where a process runs matters; where the spread is as large as the harness's disagreement
with the plain loop, that disagreement is not the harness's.

    python benchmarks/process_spread.py [--backend B] [--tasks gqa_decode,selective_state_update] [--processes 4]
        [--cpu N] [--workloads K] [--out DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from typing import Any

MODES = ("free", "pinned")


def child(backend: str | None, task_name: str, workloads: int | None, budget_s: float) -> None:
    """Measure one task's contenders twice in this process; print one JSON line a workload and contender."""
    import mlx.core as mx

    from ksearch.backends import get_backend
    from ksearch.bench.fidelity import plain_times, side_by_side
    from ksearch.harness import timing
    from ksearch.tasks import get_task

    b = get_backend(backend)
    if not b.is_gpu:
        mx.set_default_device(mx.cpu)
    task = get_task(task_name)
    chosen = task.select_workloads(b.tier)[:workloads]
    contenders = side_by_side(task, b, chosen)
    llc = int(b.profile().get("llc_bytes") or (32 << 20))
    for w in chosen:
        plan = timing.plan(task, w, llc, b.is_gpu, memory_gb=b.profile().get("memory_gb"))
        first = plain_times(task, w, contenders, plan.pool_sets, budget_s, run=plan.run)
        second = plain_times(task, w, contenders, plan.pool_sets, budget_s, run=plan.run)
        for name in contenders:
            print(json.dumps({"task": task.name, "workload": w.name, "contender": name, "run": plan.run,
                              "first_s": statistics.median(first[name]),
                              "second_s": statistics.median(second[name])}), flush=True)
        mx.clear_cache()


def spawn(args: argparse.Namespace, task: str, cpu: int | None) -> list[dict[str, Any]]:
    cmd = [sys.executable, __file__, "--child", task, "--budget", str(args.budget)]
    cmd += ["--backend", args.backend] if args.backend else []
    cmd += ["--workloads", str(args.workloads)] if args.workloads else []
    pin = (lambda: os.sched_setaffinity(0, {cpu})) if cpu is not None else None
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout, preexec_fn=pin)
    if done.returncode != 0:
        raise SystemExit(f"process_spread: a measuring process failed: {done.stderr.strip()[-800:]}")
    return [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]


def summarise(samples: dict[str, list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """One row per task, workload, contender and mode: per-process medians, their spread, the within-process drift."""
    rows = []
    keys = sorted({(s["task"], s["workload"], s["contender"]) for ss in samples.values() for s in ss})
    for task, workload, contender in keys:
        for mode, ss in samples.items():
            mine = [s for s in ss if (s["task"], s["workload"], s["contender"]) == (task, workload, contender)]
            if not mine:
                continue
            per_process = [statistics.median([s["first_s"], s["second_s"]]) for s in mine]
            within = max(max(s["first_s"], s["second_s"]) / min(s["first_s"], s["second_s"]) for s in mine)
            rows.append({"task": task, "workload": workload, "contender": contender, "mode": mode,
                         "run": mine[0]["run"], "process_s": per_process, "median_s": statistics.median(per_process),
                         "spread": max(per_process) / min(per_process), "within_process": within})
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--backend", default=None)
    ap.add_argument("--tasks", default="gqa_decode,selective_state_update")
    ap.add_argument("--processes", type=int, default=4, help="fresh processes per mode and task")
    ap.add_argument("--cpu", type=int, default=None, help="the CPU the pinned processes run on")
    ap.add_argument("--workloads", type=int, default=None, help="the first K workloads of each task")
    ap.add_argument("--budget", type=float, default=1.0, help="seconds of each plain-loop measurement")
    ap.add_argument("--timeout", type=float, default=300.0, help="seconds a measuring process may take")
    ap.add_argument("--out", default="benchmarks/results")
    ap.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child(args.backend, args.child, args.workloads, args.budget)
        return
    from ksearch.backends import get_backend
    from ksearch.bench.results import make_result, write_result
    from ksearch.errors import UsageError
    from ksearch.tasks import get_task

    try:
        b = get_backend(args.backend)
        tasks = [get_task(t).name for t in args.tasks.split(",")]
    except UsageError as exc:
        raise SystemExit(f"process_spread: {exc}") from None
    allowed = sorted(os.sched_getaffinity(0))
    cpu = allowed[-1] if args.cpu is None else args.cpu
    if cpu not in allowed:
        raise SystemExit(f"process_spread: CPU {cpu} is not one this process may use ({allowed}): pass --cpu N")
    figures: list[dict[str, Any]] = []
    for task in tasks:
        samples: dict[str, list[dict[str, Any]]] = {m: [] for m in MODES}
        for _ in range(args.processes):
            samples["free"] += spawn(args, task, None)
            samples["pinned"] += spawn(args, task, cpu)
        rows = summarise(samples)
        for r in rows:
            print(f"{r['task'][:12]:12s} {r['workload']:20s} {r['contender'][:26]:26s} {r['mode']:6s} "
                  f"{r['median_s'] * 1e6:8.1f} us  spread x{r['spread']:.2f}  within x{r['within_process']:.2f}  "
                  + " ".join(f"{t * 1e6:.1f}" for t in r["process_s"]), flush=True)
        figures += rows
    result = make_result("process-spread", b, shapes=[], dtypes=[], figures=figures,
                         summary={"pinned_cpu": cpu, "processes": args.processes, "cpus": len(allowed)})
    print(write_result(result, args.out, stem="process-spread"))


if __name__ == "__main__":
    main()
