"""What each condition of the harness's timed loop does to a kernel's latency, side by side in one process.

The harness times a call with the call's inputs made just before it (the pool's per-call stamp, pool.py), its
outputs fingerprinted just after it (the commitment, measure.py), and a few hundred microseconds of messaging
between calls; `ksearch bench fidelity` compares the result with a plain loop that cycles the same input sets. This
benchmark takes the difference apart: every contender (the task's library kernel or starter, and each baseline
variant) is called under each condition below, all interleaved call by call, every call evaluated and synchronised
inside the clock:

    plain       cycle the pool's sets, nothing between calls (the fidelity loop)
    same        one set, every call
    stamped     the pool's take() for the next call, evaluated outside the clock (the harness's inputs)
    committed   stamped, plus the fingerprint of the outputs read back to the host (the harness's gap work)
    idle_Xus    plain, with the GPU left idle X microseconds between calls (a sleep)
    busy_1000us plain, with the GPU kept busy about a millisecond between calls by unrelated work (idle GPU or idle host?)
    stamp_other plain, with another set stamped just before the call (any fresh writes, or the call's own inputs?)

With --processes, the plain loop (the fidelity benchmark's, bench/plain_loop.plain_times) also runs in a child process
of its own, alternating with the same loop here (twice each): the harness times calls in worker processes, so a difference that
follows the process and not the loop shows there (`process:here`, `process:child`; ratio to `process:here`).

With --worker-loop, the worker's own timed loop (harness/worker.py `Worker.go`: the timing pool, the ring of the
last outputs, the commitment sent on a socket) runs here, in this process, beside the plain loop: as the harness
runs it (`loop:runs`, runs of timing.RUN calls queued and evaluated together; ratio to `loop:plain_runs`, the plain
loop queuing as many), in runs with a synchronise after each of the loop's evaluations (`loop:runs_settled`: MLX's
completion thread idle when a run's clock starts), in runs with parts taken out (`loop:runs_no_stamp`: the pool's
sets cycled; `loop:runs_bare`: no stamp, ring or fingerprint; `loop:runs_flush`: stamped, then the last-level cache
cleaned by reading a buffer twice its size, so that the stamps' dirty lines are written back before the clock
starts), in runs of up to 32 calls (--long-run) from a pool of as many sets where 8 GiB allows (`loop:runs_long`, against
`loop:plain_runs_long`, the plain loop queuing as many: is the cost of the harness's work between runs fixed per run,
so that longer runs share it out?), one call a run (`loop:worker`), and one call a run with one part taken out at a time: `loop:no_ring`
(outputs not kept), `loop:no_commit` (no fingerprint computed or read back), `loop:no_stamp` (the pool's sets
cycled, no per-call stamp), `loop:bare` (all three out: what is left is the loop itself, its socket and its
bookkeeping); ratio to `loop:plain` (one call at a time, each evaluated and synchronised).

    python benchmarks/harness_conditions.py [--backend B] [--tasks gqa_decode,softmax] [--out DIR] [--calls 60]
                                            [--workloads K]
                                            [--processes] [--worker-loop [--runs-only] [--long-run N]] [--only-extra]
                                            [--stem NAME]
"""

from __future__ import annotations

import argparse
import itertools
import statistics
import time
from collections.abc import Callable
from typing import Any

#: Calls per run of `loop:runs_long` by default (timing.RUN is 24 on a GPU; KSEARCH_TIMING_RUN goes up to 32).
LONG_RUN = 32


def conditions(task: Any, w: Any, sets: int) -> dict[str, tuple[Callable[[], dict[str, Any]], Callable[[Any], None]]]:
    """name -> (inputs for the next call, made outside the clock; what happens after the call, outside the clock)."""
    import mlx.core as mx

    from ksearch.harness.digest import fingerprint_mx
    from ksearch.harness.pool import TimingPool, set_inputs

    base = set_inputs(task, w, 1, 0)
    pool = [base] + [set_inputs(task, w, 1, k, base) for k in range(1, sets)]
    cycle = itertools.cycle(pool)
    timing_pool = TimingPool(task, w, 2, sets)
    counter = itertools.count()

    def stamped() -> dict[str, Any]:
        x = timing_pool.take(7, next(counter))
        mx.eval(list(x.values()))
        mx.synchronize()
        return x

    def commit(out: Any) -> None:
        outs = out if isinstance(out, (list, tuple)) else [out]
        fingerprint_mx(outs).tolist()

    def nothing(_out: Any) -> None:
        return None

    other = TimingPool(task, w, 3, 1)
    filler = mx.random.normal((2048, 2048))
    mx.eval(filler)

    def stamp_other() -> dict[str, Any]:
        mx.eval(list(other.take(11, next(counter)).values()))
        mx.synchronize()
        return next(cycle)

    def busy(_out: Any) -> None:
        end = time.perf_counter() + 1e-3
        while time.perf_counter() < end:
            mx.eval(filler @ filler)

    def idle(us: float) -> Callable[[Any], None]:
        def after(_out: Any) -> None:
            end = time.perf_counter() + us * 1e-6
            while time.perf_counter() < end:  # a sleep this short oversleeps; spin on the host, the GPU idles
                pass
        return after

    return {
        "plain": (lambda: next(cycle), nothing),
        "same": (lambda: base, nothing),
        "stamped": (stamped, nothing),
        "committed": (stamped, commit),
        "idle_200us": (lambda: next(cycle), idle(200)),
        "idle_1000us": (lambda: next(cycle), idle(1000)),
        "busy_1000us": (lambda: next(cycle), busy),
        "stamp_other": (stamp_other, nothing),
    }


def measure(task: Any, w: Any, contenders: dict[str, Callable[..., Any]], sets: int, calls: int) -> list[dict[str, Any]]:
    import mlx.core as mx

    params = dict(w.params)
    conds = conditions(task, w, sets)
    times: dict[tuple[str, str], list[float]] = {(c, k): [] for c in conds for k in contenders}
    for rnd in range(calls + 3):
        for cname, (make, after) in conds.items():
            for name, fn in contenders.items():
                x = make()
                mx.synchronize()
                t0 = time.perf_counter()
                out = fn(**x, **params)
                mx.eval(out)
                mx.synchronize()
                t1 = time.perf_counter()
                after(out)
                del out, x
                if rnd >= 3:  # three rounds of warm-up
                    times[(cname, name)].append(t1 - t0)
    rows = []
    for (cname, name), ts in times.items():
        plain = statistics.median(times[("plain", name)])
        med = statistics.median(ts)
        rows.append({"task": task.name, "workload": w.name, "contender": name, "condition": cname,
                     "latency_s": med, "min_s": min(ts), "vs_plain_ratio": med / plain, "calls": len(ts)})
    return rows


def child_medians(task: str, workload: str, sources: dict[str, str], sets: int, cpu: bool) -> dict[str, float]:
    """The plain loop's median call per contender, in a fresh process (this script with --child)."""
    import json
    import subprocess
    import sys

    spec = json.dumps({"task": task, "workload": workload, "sources": sources, "sets": sets, "cpu": cpu})
    done = subprocess.run([sys.executable, __file__, "--child", spec], capture_output=True, text=True, timeout=300,
                          check=False)
    if done.returncode != 0:
        raise SystemExit(f"the child loop failed: {done.stderr[-2000:]}")
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


def child_main(spec_json: str) -> None:
    import json

    from ksearch.bench.plain_loop import load_source, plain_times
    from ksearch.tasks import get_task

    spec = json.loads(spec_json)
    if spec.get("cpu"):
        import mlx.core as mx

        mx.set_default_device(mx.cpu)
    task = get_task(spec["task"])
    w = next(x for x in task.workloads if x.name == spec["workload"])
    fns = {name: getattr(load_source(src, f"child_{k}"), name.split(":", 1)[1] if name.startswith("baseline:") else "run")
           for k, (name, src) in enumerate(spec["sources"].items())}
    times = plain_times(task, w, fns, int(spec["sets"]))
    print(json.dumps({k: statistics.median(v) for k, v in times.items()}))


def process_rows(task: Any, w: Any, contenders: dict[str, Callable[..., Any]], sources: dict[str, str],
                 sets: int, cpu: bool) -> list[dict[str, Any]]:
    """The plain loop here, in a child process, here again and in a child again: medians and ratios to here."""
    from ksearch.bench.plain_loop import plain_times

    here: dict[str, list[float]] = {k: [] for k in contenders}
    child: dict[str, list[float]] = {k: [] for k in contenders}
    for _ in range(2):
        for k, v in plain_times(task, w, contenders, sets).items():
            here[k].append(statistics.median(v))
        for k, m in child_medians(task.name, w.name, sources, sets, cpu).items():
            child[k].append(m)
    rows = []
    for name in contenders:
        ref = statistics.fmean(here[name])
        for where, meds in (("process:here", here[name]), ("process:child", child[name])):
            rows.append({"task": task.name, "workload": w.name, "contender": name, "condition": where,
                         "latency_s": statistics.fmean(meds), "min_s": min(meds),
                         "vs_plain_ratio": statistics.fmean(meds) / ref, "calls": len(meds)})
    return rows


def worker_loop_rows(task: Any, w: Any, contenders: dict[str, Callable[..., Any]], sets: int,
                     calls: int, llc_bytes: int, runs_only: bool = False,
                     long_run_most: int = LONG_RUN) -> list[dict[str, Any]]:
    """Worker.go in this process (a socketpair for its commitments, drained by a thread) against the plain loop."""
    import collections
    import socket
    import threading

    import mlx.core as mx

    from ksearch.bench.plain_loop import plain_times
    from ksearch.harness import digest
    from ksearch.harness import worker as worker_module
    from ksearch.harness.pool import TimingPool, set_inputs
    from ksearch.harness.timing import RING, RUN, ring_for
    from ksearch.harness.worker import Worker

    ours, theirs = socket.socketpair()
    stop = threading.Event()

    def drain() -> None:
        theirs.settimeout(0.05)
        while not stop.is_set():
            try:
                theirs.recv(1 << 16)
            except (TimeoutError, OSError):
                continue

    threading.Thread(target=drain, daemon=True).start()
    worker = Worker(ours)
    worker.mx, worker._eval, worker._synchronize, worker.task = mx, mx.eval, mx.synchronize, task
    worker.params = dict(w.params)
    digest.capture_ops()
    real_fp = digest.fingerprints_mx
    constant = mx.zeros((RUN, 2), dtype=mx.uint32)
    mx.eval(constant)
    base = set_inputs(task, w, 1, 0)
    cycled = [base] + [set_inputs(task, w, 1, k, base) for k in range(1, sets)]

    class Cycled:
        sets = cycled

        def take(self, _batch: int, call: int) -> dict[str, Any]:
            return cycled[call % len(cycled)]

    flush_buf = mx.zeros((max(1, int(llc_bytes)) // 2,), dtype=mx.float32)  # 2x the last-level cache, clean
    mx.eval(flush_buf)

    class Flushed:
        """The timing pool, with the last-level cache cleaned after each stamp: dirty lines left by the stamps are
        written back before the run's clock starts, not during its calls."""

        def __init__(self) -> None:
            self.real = pools[sets]
            self.sets = self.real.sets

        def take(self, batch: int, call: int) -> dict[str, Any]:
            x = self.real.take(batch, call)
            mx.eval(list(x.values()), flush_buf.sum())
            return x

    variants = ("runs", "runs_settled", "runs_no_stamp", "runs_flush", "runs_bare", "runs_long",
                "worker", "no_ring", "no_commit", "no_stamp", "bare")
    if runs_only:
        variants = tuple(v for v in variants if v.startswith("runs"))
    queued = {v for v in variants if v.startswith("runs")}
    run = min(sets, RUN)
    # Longer runs, from a pool of more sets where 8 GiB allows: does the harness's work between runs cost a fixed
    # amount per run (then longer runs share it out), or a share of every call?
    per_set = max(1, task.input_bytes(w) + task.output_bytes(w))
    long_sets = max(sets, min(long_run_most, (8 << 30) // per_set))
    long_run = min(long_sets, long_run_most)
    times: dict[tuple[str, str], list[float]] = {(v, k): [] for v in ("plain", "plain_runs", "plain_runs_long",
                                                                       *variants) for k in contenders}
    offset = 0
    lengths = {"plain": 1, "plain_runs": run, "plain_runs_long": long_run}
    # One timing pool of each size, shared by the loops (each call's take stamps its set anew).
    pools = {n: TimingPool(task, w, 5, n) for n in {sets, long_sets if "runs_long" in variants else sets}}
    for _ in range(3):
        for name, fn in contenders.items():
            # One block of each plain loop a round: the three rounds alternate them with the worker's loops.
            for k, v in plain_times(task, w, {name: fn}, sets, budget_s=0.3, blocks=1).items():
                times[("plain", k)].extend(v)
            for k, v in plain_times(task, w, {name: fn}, sets, budget_s=0.3, blocks=1, run=run).items():
                times[("plain_runs", k)].extend(v)
            if "runs_long" in variants:
                for k, v in plain_times(task, w, {name: fn}, long_sets, budget_s=0.3, blocks=1,
                                        run=long_run).items():
                    times[("plain_runs_long", k)].extend(v)
            worker.run = fn
            for v in variants:
                stamped = v not in ("no_stamp", "bare", "runs_no_stamp", "runs_bare")
                pool_sets = long_sets if v == "runs_long" else sets
                worker.pool = Flushed() if v == "runs_flush" else pools[pool_sets] if stamped else Cycled()
                ring = 2 * long_run if v == "runs_long" else RING
                keep = 0 if v in ("no_ring", "bare", "runs_bare") else ring
                worker.ring = collections.deque(maxlen=keep)
                worker_module.ring_for = lambda _run, n=keep: n  # the worker keeps this variant's ring
                bare = v in ("no_commit", "bare", "runs_bare")
                digest.fingerprints_mx = (lambda calls: constant[:len(calls)]) if bare else real_fp
                # Every evaluation of the loop followed by a synchronise: MLX's completion thread idle when a run's
                # clock starts (it still releases temporaries after mx.eval returns).
                worker._eval = (lambda xs: (mx.eval(xs), mx.synchronize())) if v == "runs_settled" else mx.eval
                length = long_run if v == "runs_long" else run if v in queued else 1
                lengths[v] = length
                n = calls
                worker_module.RUN = max(RUN, length)  # the worker caps a run at timing.RUN
                reply = worker.go({"offset": offset, "n": n, "batch": offset, "run": length})
                worker_module.RUN = RUN
                worker_module.ring_for = ring_for
                digest.fingerprints_mx = real_fp
                offset += n
                if not reply.get("ok"):
                    raise SystemExit(f"the worker's loop failed: {reply}")
                times[(v, name)].extend(reply["times"][3:])
    stop.set()
    rows = []
    for (v, name), ts in times.items():
        # Queued runs against the plain loop's queued runs; one call at a time against one call at a time.
        kind = "plain_runs_long" if v in ("runs_long", "plain_runs_long") else (
            "plain_runs" if v in queued or v == "plain_runs" else "plain")
        plain = statistics.median(times[(kind, name)])
        rows.append({"task": task.name, "workload": w.name, "contender": name, "condition": f"loop:{v}",
                     "latency_s": statistics.median(ts), "min_s": min(ts),
                     "vs_plain_ratio": statistics.median(ts) / plain, "calls": len(ts), "run": lengths.get(v)})
    return rows


def main() -> None:
    import mlx.core as mx

    from ksearch.backends import get_backend
    from ksearch.bench.plain_loop import candidate_for, load_source
    from ksearch.bench.results import make_result, write_result
    from ksearch.harness import timing
    from ksearch.harness.baselines import baseline_variants
    from ksearch.tasks import get_task

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--backend", default=None)
    ap.add_argument("--tasks", default="gqa_decode,softmax")
    ap.add_argument("--out", default="benchmarks/results")
    ap.add_argument("--calls", type=int, default=60)
    ap.add_argument("--workloads", type=int, default=None, help="the first K workloads of each task")
    ap.add_argument("--stem", default=None, help="the result file's name before -BACKEND-DEVICE.json")
    ap.add_argument("--processes", action="store_true", help="also the plain loop in a child process")
    ap.add_argument("--worker-loop", action="store_true", help="also the worker's timed loop, here, with ablations")
    ap.add_argument("--runs-only", action="store_true", help="with --worker-loop: only the loops in runs")
    ap.add_argument("--long-run", type=int, default=LONG_RUN, help="calls per run of loop:runs_long, at most")
    ap.add_argument("--only-extra", action="store_true", help="skip the in-loop conditions (with the two above)")
    ap.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child_main(args.child)
        return
    b = get_backend(args.backend)
    if not b.is_gpu:
        mx.set_default_device(mx.cpu)
    llc = int(b.profile().get("llc_bytes") or (32 << 20))
    figures: list[dict[str, Any]] = []
    shapes: list[dict[str, Any]] = []
    dtypes: set[str] = set()
    for tname in args.tasks.split(","):
        task = get_task(tname)
        workloads = task.select_workloads(b.tier)[:args.workloads]
        cname, csource = candidate_for(task, b, workloads)
        contenders = {f"candidate:{cname}": load_source(csource, f"{task.name}_cand").run}
        sources = {f"candidate:{cname}": csource}
        bsource = task.baseline(task.default_baseline).source_for(b.family)
        if bsource is not None:
            module = load_source(bsource, f"{task.name}_base")
            contenders |= {f"baseline:{v}": getattr(module, v) for v in baseline_variants(bsource)}
            sources |= {f"baseline:{v}": bsource for v in baseline_variants(bsource)}
        for w in workloads:
            sets = timing.plan(task, w, llc, b.is_gpu, memory_gb=b.profile().get("memory_gb")).pool_sets
            rows = [] if args.only_extra else measure(task, w, contenders, sets, args.calls)
            if args.worker_loop:
                rows += worker_loop_rows(task, w, contenders, sets, args.calls, llc, args.runs_only, args.long_run)
            if args.processes:
                rows += process_rows(task, w, contenders, sources, sets, not b.is_gpu)
            for r in rows:
                print(f"{r['task']:<12} {r['workload']:<24} {r['contender']:<28} {r['condition']:<12} "
                      f"{r['latency_s'] * 1e6:9.1f} us  x{r['vs_plain_ratio']:.2f}", flush=True)
            figures.extend(rows)
            dtypes.add(w.dtype)
            shapes.append({"task": task.name, "workload": w.name, "pool_sets": sets, **dict(w.axes), **dict(w.params)})
            mx.clear_cache()
    data = make_result("harness-conditions", b, figures, shapes, sorted(dtypes),
                       notes="median latency of each contender under each condition of the harness's timed loop, "
                             "and its ratio to the plain loop (cycling the pool's sets, nothing between calls)")
    print(write_result(data, args.out, stem=args.stem))


if __name__ == "__main__":
    main()
