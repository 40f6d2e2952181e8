"""How far a short kernel's plain-loop time moves from one fresh process to the next: the floor under any comparison
of the harness (which times in worker processes of its own, new for every evaluation) with a plain loop.

Each of `--processes` fresh processes per mode measures every contender of every workload (the fidelity benchmark's
plain loop, bench/plain_loop.plain_times: runs as long as the harness's, the same input sets) twice, one after the
other. Modes, taking turns process by process so that drift hits both alike:

    free     the process as the OS places it (as the harness's workers and the fidelity loop run)
    pinned   the process held to one CPU (`--cpu`, default the last this process may use), with every thread it starts

Per workload and contender: each process's median time per call, their spread (slowest / fastest process) per mode,
and the largest change between a process's two measurements (within a process). Where the free processes spread
wider than the pinned ones, where a process runs matters; where the spread is as large as the harness's disagreement
with the plain loop, that disagreement is not the harness's.

`--trace SECONDS` asks where the time of a slow stretch goes instead: one process per task runs each contender's runs
in turn for SECONDS and splits every run into the host's work (building the calls' graphs, then dispatching them with
`mx.async_eval`: the CPU time of this thread is taken over that part) and the wait for the device (`mx.eval` and a
synchronise), with the CPU the thread ran on and that CPU's clock where the OS shows it. Per contender, by fifths of
the trace: the median call and its parts, so a slow stretch is seen to be host dispatch (a slower or busier CPU) or
device time.

    python benchmarks/process_spread.py [--backend B] [--tasks gqa_decode,selective_state_update] [--processes 4]
        [--cpu N] [--workloads K] [--trace SECONDS] [--out DIR]
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


def _contenders(backend: str | None, task_name: str, workloads: int | None) -> tuple[Any, list[tuple[Any, Any]],
                                                                                  dict[str, Any]]:
    """(task, [(workload, timing plan)], contenders) as the fidelity benchmark's plain loop has them, in a process
    whose default device is the backend's."""
    import mlx.core as mx

    from ksearch.backends import get_backend
    from ksearch.bench.plain_loop import side_by_side
    from ksearch.harness import timing
    from ksearch.tasks import get_task

    b = get_backend(backend)
    if not b.is_gpu:
        mx.set_default_device(mx.cpu)
    task = get_task(task_name)
    chosen = task.select_workloads(b.tier)[:workloads]
    llc = int(b.profile().get("llc_bytes") or (32 << 20))
    plans = [(w, timing.plan(task, w, llc, b.is_gpu, memory_gb=b.profile().get("memory_gb"))) for w in chosen]
    return task, plans, side_by_side(task, b, chosen)


def child(backend: str | None, task_name: str, workloads: int | None, budget_s: float) -> None:
    """Measure one task's contenders twice in this process; print one JSON line a workload and contender."""
    import mlx.core as mx

    from ksearch.bench.plain_loop import plain_times

    task, plans, contenders = _contenders(backend, task_name, workloads)
    for w, plan in plans:
        first = plain_times(task, w, contenders, plan.pool_sets, budget_s, run=plan.run)
        second = plain_times(task, w, contenders, plan.pool_sets, budget_s, run=plan.run)
        for name in contenders:
            print(json.dumps({"task": task.name, "workload": w.name, "contender": name, "run": plan.run,
                              "first_s": statistics.median(first[name]),
                              "second_s": statistics.median(second[name])}), flush=True)
        mx.clear_cache()


def _cpu_now() -> tuple[int, float | None]:
    """(the CPU this thread last ran on, its clock in MHz where /sys or /proc shows it)."""
    try:
        with open("/proc/thread-self/stat") as f:
            cpu = int(f.read().rsplit(")", 1)[1].split()[36])
    except (OSError, ValueError, IndexError):
        return -1, None
    try:
        with open(f"/sys/devices/system/cpu/cpu{cpu}/cpufreq/scaling_cur_freq") as f:
            return cpu, int(f.read()) / 1000
    except (OSError, ValueError):
        pass
    try:
        with open("/proc/cpuinfo") as f:
            blocks = f.read().split("\n\n")
        for block in blocks:
            fields = dict(line.split(":", 1) for line in block.splitlines() if ":" in line)
            if int(fields.get("processor\t", fields.get("processor", "-1"))) == cpu:
                return cpu, float(fields.get("cpu MHz\t\t", fields.get("cpu MHz", "nan")))
    except (OSError, ValueError):
        pass
    return cpu, None


def trace_child(backend: str | None, task_name: str, workloads: int | None, seconds: float) -> None:
    """--trace: print one JSON line per run of each contender (host build, host dispatch, device wait, the thread's
    CPU time while dispatching, the CPU and its clock), the contenders taking turns run by run for `seconds`."""
    import itertools
    import time

    import mlx.core as mx

    from ksearch.bench.plain_loop import task_calls
    from ksearch.harness.pool import set_inputs

    task, plans, contenders = _contenders(backend, task_name, workloads)
    for w, plan in plans:
        base = set_inputs(task, w, 1, 0)
        pool = [base] + [set_inputs(task, w, 1, k, base) for k in range(1, plan.pool_sets)]
        params = dict(w.params)
        # Chained where the task declares a chain, as the harness's runs are.
        calls = {name: task_calls(task, fn, itertools.cycle(pool), params) for name, fn in contenders.items()}
        for call in calls.values():  # warm-up: compiles and allocations
            for _ in range(3):
                mx.eval(call())
        mx.synchronize()
        t_start = time.perf_counter()
        while time.perf_counter() - t_start < seconds:
            for name, call in calls.items():
                t0 = time.perf_counter()
                outs = [call() for _ in range(plan.run)]
                t1 = time.perf_counter()
                c1 = time.thread_time()
                mx.async_eval(outs)
                t2 = time.perf_counter()
                c2 = time.thread_time()
                mx.eval(outs)
                mx.synchronize()
                t3 = time.perf_counter()
                cpu, mhz = _cpu_now()
                print(json.dumps({"task": task.name, "workload": w.name, "contender": name, "run": plan.run,
                                  "at_s": t0 - t_start, "build_s": (t1 - t0) / plan.run,
                                  "dispatch_s": (t2 - t1) / plan.run, "dispatch_cpu_s": (c2 - c1) / plan.run,
                                  "wait_s": (t3 - t2) / plan.run, "call_s": (t3 - t0) / plan.run,
                                  "cpu": cpu, "mhz": mhz}), flush=True)
                del outs
        mx.clear_cache()


def trace_summary(lines: list[dict[str, Any]], fifths: int = 5) -> list[dict[str, Any]]:
    """Per workload and contender, per fifth of the trace: the median call and its parts, the CPUs run on, the
    median clock; and the whole trace's spread of fifths (slowest / fastest median call)."""
    rows = []
    for key in sorted({(x["task"], x["workload"], x["contender"]) for x in lines}):
        mine = [x for x in lines if (x["task"], x["workload"], x["contender"]) == key]
        end = max(x["at_s"] for x in mine) + 1e-9
        parts = []
        for k in range(fifths):
            seg = [x for x in mine if k * end / fifths <= x["at_s"] < (k + 1) * end / fifths]
            if not seg:
                continue
            clocks = [x["mhz"] for x in seg if x["mhz"] is not None]
            parts.append({f: statistics.median(x[f] for x in seg)
                          for f in ("call_s", "build_s", "dispatch_s", "dispatch_cpu_s", "wait_s")}
                         | {"runs": len(seg), "cpus": sorted({x["cpu"] for x in seg}),
                            "mhz": statistics.median(clocks) if clocks else None})
        calls = [p["call_s"] for p in parts]
        rows.append({"task": key[0], "workload": key[1], "contender": key[2], "run": mine[0]["run"],
                     "fifths": parts, "spread": max(calls) / min(calls), "runs": len(mine)})
    return rows


def trace(args: argparse.Namespace, tasks: list[str]) -> list[dict[str, Any]]:
    rows = []
    for task in tasks:
        cmd = [sys.executable, __file__, "--child", task, "--trace", str(args.trace)]
        cmd += ["--backend", args.backend] if args.backend else []
        cmd += ["--workloads", str(args.workloads)] if args.workloads else []
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout)
        if done.returncode != 0:
            raise SystemExit(f"process_spread: the tracing process failed: {done.stderr.strip()[-800:]}")
        summary = trace_summary([json.loads(x) for x in done.stdout.splitlines() if x.startswith("{")])
        for r in summary:
            print(f"{r['task'][:12]:12s} {r['workload']:20s} {r['contender'][:26]:26s} spread x{r['spread']:.2f}",
                  flush=True)
            for p in r["fifths"]:
                mhz = f"{p['mhz']:.0f} MHz" if p["mhz"] else "clock not shown"
                print(f"    call {p['call_s'] * 1e6:7.1f} us = build {p['build_s'] * 1e6:6.1f} + dispatch "
                      f"{p['dispatch_s'] * 1e6:6.1f} (cpu {p['dispatch_cpu_s'] * 1e6:6.1f}) + wait "
                      f"{p['wait_s'] * 1e6:6.1f}   cpus {p['cpus'][:6]} {mhz}", flush=True)
        rows += summary
    return rows


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
    ap.add_argument("--trace", type=float, default=0.0,
                    help="seconds of one traced process per task instead of the spread (see above)")
    ap.add_argument("--out", default="benchmarks/results")
    ap.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        if args.trace > 0:
            trace_child(args.backend, args.child, args.workloads, args.trace)
        else:
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
    if args.trace > 0:
        result = make_result("process-trace", b, shapes=[], dtypes=[], figures=trace(args, tasks),
                             summary={"seconds": args.trace, "cpus": len(allowed)})
        print(write_result(result, args.out, stem="process-trace"))
        return
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
