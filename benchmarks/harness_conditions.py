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

    python benchmarks/harness_conditions.py [--backend B] [--tasks gqa_decode,softmax] [--out DIR] [--calls 60]
"""

from __future__ import annotations

import argparse
import itertools
import statistics
import time
from collections.abc import Callable
from typing import Any


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


def main() -> None:
    import mlx.core as mx

    from ksearch.backends import get_backend
    from ksearch.bench.fidelity import _load, candidate_for
    from ksearch.bench.results import make_result, write_result
    from ksearch.harness import timing
    from ksearch.harness.baselines import baseline_variants
    from ksearch.tasks import get_task

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--backend", default=None)
    ap.add_argument("--tasks", default="gqa_decode,softmax")
    ap.add_argument("--out", default="benchmarks/results")
    ap.add_argument("--calls", type=int, default=60)
    args = ap.parse_args()
    b = get_backend(args.backend)
    if not b.is_gpu:
        mx.set_default_device(mx.cpu)
    llc = int(b.profile().get("llc_bytes") or (32 << 20))
    figures: list[dict[str, Any]] = []
    shapes: list[dict[str, Any]] = []
    dtypes: set[str] = set()
    for tname in args.tasks.split(","):
        task = get_task(tname)
        workloads = task.select_workloads(b.tier)
        cname, csource = candidate_for(task, b, workloads)
        contenders = {f"candidate:{cname}": _load(csource, f"{task.name}_cand").run}
        bsource = task.baseline(task.default_baseline).source_for(b.family)
        if bsource is not None:
            module = _load(bsource, f"{task.name}_base")
            contenders |= {f"baseline:{v}": getattr(module, v) for v in baseline_variants(bsource)}
        for w in workloads:
            sets = timing.plan(task, w, llc, b.is_gpu).pool_sets
            rows = measure(task, w, contenders, sets, args.calls)
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
    print(write_result(data, args.out))


if __name__ == "__main__":
    main()
