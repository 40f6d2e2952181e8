"""What happens between a short kernel's timed runs, and what it does to the runs: side by side in one process.

The harness times a candidate in runs (timing.RUN calls queued, evaluated and synchronised inside one clock) and
between runs fingerprints the run's outputs on the device and reads them back (the commitment,
digest.fingerprints_mx), then stamps the next run's inputs. Calls under 100 us measured 1.2-1.4x their plain loop's
time in the worker's loop (harness_conditions.py --worker-loop; `loop:runs_bare`, without that work, agreed). This
benchmark asks which part of "between" matters: the same contender in runs of the same length (chained where the task
declares a chain, as the harness's runs are), with only this before each run (outside the clock, after the previous
run, whose outputs the fingerprint takes):

    none              nothing (the plain loop's runs)
    idle_300us        the host spins 300 us, the GPU idles
    fingerprint       the run's outputs fingerprinted and read back, as the worker commits to them
    fingerprint_kept  the same device work, waited for but not read back (is it the host's read of a managed-memory
                      buffer that slows the next run, its pages moving to the host and back?)
    read_back         one value of the previous run's last output summed on the device and read back (8 bytes)
    fingerprint_fused (on a GPU) the same lanes, each call's outputs on their own through one `mx.compile`d function:
                      a fused kernel and two sums an output, no stacked copy (is it the fingerprint's memory traffic
                      and temporaries that slow the next run?); checked equal to the worker's lanes on first use
    busy_300us        unrelated device work (matmuls, each waited for) until 300 us have passed
    host_scalar       one value made on the host (4 bytes: on CUDA, MLX's pool of small managed-memory blocks, which
                      the harness's per-call factors and the fingerprint's constants use) read by one device operation
    host_array        the same with 64 values (256 bytes: the allocator's ordinary buffers)

The conditions take turns run by run (so that drift hits all alike). Each row: the median time per call and its ratio
to `none`, and, where NVML is present, the median SM clock read after each run (MHz). MLX's own settings in the
environment (MLX_USE_CUDA_GRAPHS, MLX_CUDA_GRAPH_CACHE_SIZE, MLX_MAX_OPS_PER_BUFFER, ...) are recorded with the
figures, and `--stem` names the file, so that runs under different settings sit side by side.

    python benchmarks/between_runs.py [--backend B] [--tasks softmax,gqa_decode] [--runs 150] [--out DIR] [--stem S]
"""

from __future__ import annotations

import argparse
import ctypes
import itertools
import os
import statistics
import time
from collections.abc import Callable
from typing import Any

CONDITIONS = ("none", "idle_300us", "fingerprint", "fingerprint_kept", "read_back", "busy_300us", "host_scalar",
              "host_array")
#: Conditions timed on a GPU only: on the CPU, `mx.compile` builds C++ for seconds in every fresh process.
GPU_CONDITIONS = ("fingerprint_fused",)


def fused_fingerprinter() -> Callable[[list[tuple[Any, ...]]], Any]:
    """A function giving what digest.fingerprints_mx gives for a run's outputs (a lazy uint32 array, one pair of lanes
    a call), each call's outputs taken on their own through one compiled function (words, keys, mix and both sums)."""
    import mlx.core as mx

    from ksearch.harness import digest

    fused = mx.compile(lambda a, keys: digest.lanes_mx(digest._words_mx(a), keys))

    def prints(calls: list[tuple[Any, ...]]) -> Any:
        rows = []
        for outs in calls:
            total = mx.zeros((2,), dtype=mx.uint32)
            for k, a in enumerate(outs):
                words = a.size * (2 if a.dtype.size == 8 else 1)
                total = total + fused(a, digest._positions_mx(words, k))
            rows.append(total)
        return mx.stack(rows)

    return prints


def sm_clock_reader() -> Callable[[], int | None]:
    """A function returning the GPU's current SM clock in MHz through NVML, or None where there is none."""
    try:
        nvml = ctypes.CDLL("libnvidia-ml.so.1")
        handle = ctypes.c_void_p()
        if nvml.nvmlInit_v2() or nvml.nvmlDeviceGetHandleByIndex_v2(0, ctypes.byref(handle)):
            return lambda: None
    except (OSError, AttributeError):
        return lambda: None
    clock = ctypes.c_uint()

    def read() -> int | None:
        return None if nvml.nvmlDeviceGetClockInfo(handle, 1, ctypes.byref(clock)) else int(clock.value)  # 1: SM

    return read


def _spin(us: float) -> None:
    end = time.perf_counter() + us * 1e-6
    while time.perf_counter() < end:  # a sleep this short oversleeps
        pass


def between_rows(task: Any, w: Any, contenders: dict[str, Callable[..., Any]], sets: int, run: int,
                 runs: int) -> list[dict[str, Any]]:
    import mlx.core as mx

    from ksearch.bench.plain_loop import task_calls
    from ksearch.harness.digest import fingerprints_mx
    from ksearch.harness.pool import set_inputs

    base = set_inputs(task, w, 1, 0)
    pool = [base] + [set_inputs(task, w, 1, k, base) for k in range(1, sets)]
    params = dict(w.params)
    # Small matrices, so that the busy work ends within a matmul of its 300 us (a CPU's take far longer than a GPU's).
    busy_a = mx.random.normal((1024, 1024) if mx.default_device() == mx.gpu else (128, 128))
    mx.eval(busy_a)
    clock = sm_clock_reader()

    def fingerprint(outs: list[tuple[Any, ...]]) -> None:
        prints = fingerprints_mx(outs)
        mx.eval(prints)
        prints.tolist()

    def fingerprint_kept(outs: list[tuple[Any, ...]]) -> None:
        mx.eval(fingerprints_mx(outs))
        mx.synchronize()

    def read_back(outs: list[tuple[Any, ...]]) -> None:
        mx.sum(outs[-1][0].reshape(-1)[:1]).item()

    fused = fused_fingerprinter()
    checked = [False]

    def fingerprint_fused(outs: list[tuple[Any, ...]]) -> None:
        prints = fused(outs).tolist()
        if not checked[0]:
            if prints != fingerprints_mx(outs).tolist():
                raise SystemExit("between_runs: the fused fingerprint's lanes differ from the worker's")
            checked[0] = True

    def busy() -> None:
        end = time.perf_counter() + 300e-6
        while True:  # one matmul at least, each waited for, until 300 us have passed
            mx.eval(busy_a @ busy_a)
            mx.synchronize()
            if time.perf_counter() >= end:
                break

    made = [0.0]

    def host_made(n: int) -> None:
        made[0] += 1.0
        a = mx.array(made[0]) if n == 1 else mx.array([made[0]] * n)
        mx.eval(a * 2)
        mx.synchronize()

    before: dict[str, Callable[[list[tuple[Any, ...]]], None]] = {
        "none": lambda _o: None,
        "idle_300us": lambda _o: _spin(300),
        "fingerprint": fingerprint,
        "fingerprint_kept": fingerprint_kept,
        "read_back": read_back,
        "busy_300us": lambda _o: busy(),
        "host_scalar": lambda _o: host_made(1),
        "host_array": lambda _o: host_made(64),
        "fingerprint_fused": fingerprint_fused,
    }
    conditions = CONDITIONS + (GPU_CONDITIONS if mx.default_device() == mx.gpu else ())
    rows = []
    for name, fn in contenders.items():
        call = task_calls(task, fn, itertools.cycle(pool), params)  # chained where the task declares a chain
        times: dict[str, list[float]] = {c: [] for c in conditions}
        clocks: dict[str, list[int]] = {c: [] for c in conditions}
        last: list[tuple[Any, ...]] = []
        for k in range(runs + 2):  # the first two rounds warm up
            for cond in conditions:
                if last:
                    before[cond](last)  # on the previous run's outputs, as the worker commits to them
                t0 = time.perf_counter()
                outs = [tuple(o) if isinstance(o, (tuple, list)) else (o,)
                        for o in (call() for _ in range(run))]
                mx.eval(outs)
                mx.synchronize()
                elapsed = time.perf_counter() - t0
                mhz = clock()
                last = outs
                if k >= 2:
                    times[cond].append(elapsed / run)
                    if mhz is not None:
                        clocks[cond].append(mhz)
        plain = statistics.median(times["none"])
        for cond in conditions:
            rows.append({"task": task.name, "workload": w.name, "contender": name, "condition": cond, "run": run,
                         "latency_s": statistics.median(times[cond]), "vs_none_ratio":
                         statistics.median(times[cond]) / plain, "runs": len(times[cond]),
                         "sm_clock_mhz": statistics.median(clocks[cond]) if clocks[cond] else None})
    return rows


def main() -> None:
    import mlx.core as mx

    from ksearch.backends import get_backend
    from ksearch.bench.plain_loop import side_by_side
    from ksearch.bench.results import make_result, write_result
    from ksearch.errors import UsageError
    from ksearch.harness import timing
    from ksearch.tasks import get_task

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--backend", default=None)
    ap.add_argument("--tasks", default="softmax,gqa_decode")
    ap.add_argument("--runs", type=int, default=150, help="timed runs per condition and contender")
    ap.add_argument("--out", default="benchmarks/results")
    ap.add_argument("--stem", default="between-runs", help="the result file's name before the backend and device")
    args = ap.parse_args()
    try:
        b = get_backend(args.backend)
        tasks = [get_task(t) for t in args.tasks.split(",")]
    except UsageError as exc:
        raise SystemExit(f"between_runs: {exc}") from None
    if not b.is_gpu:
        mx.set_default_device(mx.cpu)
    llc = int(b.profile().get("llc_bytes") or (32 << 20))
    figures: list[dict[str, Any]] = []
    mlx_env = {k: v for k, v in sorted(os.environ.items()) if k.startswith("MLX_")}
    for task in tasks:
        workloads = task.select_workloads(b.tier)
        contenders = side_by_side(task, b, workloads)
        for w in workloads:
            plan = timing.plan(task, w, llc, b.is_gpu, memory_gb=b.profile().get("memory_gb"))
            rows = between_rows(task, w, contenders, plan.pool_sets, min(plan.pool_sets, timing.RUN), args.runs)
            for r in rows:
                mhz = f"{r['sm_clock_mhz']} MHz" if r["sm_clock_mhz"] else ""
                print(f"{r['task']:12s} {r['workload']:22s} {r['contender'][:30]:30s} {r['condition']:17s} "
                      f"{r['latency_s'] * 1e6:8.1f} us  x{r['vs_none_ratio']:.2f}  {mhz}", flush=True)
            figures.extend(r | {"mlx_env": mlx_env} for r in rows)
    result = make_result("between-runs", b, shapes=[], dtypes=[], figures=figures)
    print(write_result(result, args.out, stem=args.stem))


if __name__ == "__main__":
    main()
