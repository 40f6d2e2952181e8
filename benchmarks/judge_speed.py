"""How long the parent takes to judge one output against its reference (harness/judge.py), at the sizes of the GPU
workloads' outputs, side by side in one process: `judge()` (its tolerance check in cache-sized chunks) against the
same check over the whole arrays at once (the definition, as judge() computed it before). Per task and GPU-tier
search workload, the median of `--repeat` judgements of an output within tolerance (every trial and checked timed
call of a passing candidate), alternated, and of one that fails (judge() only: it checks the whole arrays again for
its message).

    python benchmarks/judge_speed.py [--tasks softmax attention rmsnorm] [--repeat 7] [--out benchmarks/results]

No GPU needed: the parent judges in NumPy on the host. Writes `judge-speed-mlx-cpu-<device>.json`.
"""

from __future__ import annotations

import statistics
import time
from typing import Any

import numpy as np

from ksearch.backends import get_backend
from ksearch.bench.host_checks import gpu_search_workloads, parse
from ksearch.bench.results import make_result, write_result
from ksearch.bench.timing import geomean
from ksearch.harness.judge import judge


def whole_array(outputs: list[np.ndarray], refs: list[np.ndarray], atol: float, rtol: float) -> bool:
    """The tolerance check over whole arrays, with its error maxima (what judge() computed for every output)."""
    ok = True
    for out, ref in zip(outputs, refs, strict=True):
        o, r = out.astype(np.float32, copy=False), ref.astype(np.float32, copy=False)
        abs_r = np.abs(r)
        diff = np.abs(o - r)
        ok = ok and bool((diff <= atol + rtol * abs_r).all())
        float(diff.max()), float((diff / np.maximum(abs_r, atol)).max())
    return ok


def main() -> None:
    args = parse(__doc__.splitlines()[0], ["softmax", "attention", "rmsnorm"])
    rng = np.random.default_rng(0)
    figures: list[dict[str, Any]] = []
    shapes: list[dict[str, Any]] = []
    dtypes: set[str] = set()
    for task, w in gpu_search_workloads(args.tasks):
        name = task.name
        atol, rtol = task.tolerance(w.dtype)
        refs, outs, kinds = [], [], []
        for spec in task.outputs:
            shape, dtype = spec.resolved_shape(w), spec.resolved_dtype(w)
            ref = rng.standard_normal(shape, dtype=np.float32)
            refs.append(ref)  # bfloat16 outputs reach judge() widened to float32, float16 ones as they are
            outs.append(ref.astype(np.float16) if dtype == "float16" else ref.copy())
            kinds.append(dtype)
        bad = [o.copy() for o in outs]
        bad[0].reshape(-1)[bad[0].size // 2] += 10
        chunked, whole, failing = [], [], []
        for _ in range(args.repeat):
            t0 = time.perf_counter()
            assert judge(task, w, outs, kinds, refs).status == "passed"
            t1 = time.perf_counter()
            assert whole_array(outs, refs, atol, rtol)
            t2 = time.perf_counter()
            assert judge(task, w, bad, kinds, refs).status == "wrong_answer"
            t3 = time.perf_counter()
            chunked.append(t1 - t0)
            whole.append(t2 - t1)
            failing.append(t3 - t2)
        row = {"task": name, "workload": w.name, "values": int(sum(o.size for o in outs)),
               "judge_within_s": statistics.median(chunked), "whole_array_within_s": statistics.median(whole),
               "judge_outside_s": statistics.median(failing)}
        row["speedup"] = row["whole_array_within_s"] / row["judge_within_s"]
        figures.append(row)
        shapes.append({"task": name, "workload": w.name, **dict(w.axes)})
        dtypes.add(w.dtype)
        print(f"{name:10s} {w.name:36s} {row['values'] / 1e6:6.1f} M values  within: judge "
              f"{row['judge_within_s']:.3f} s, whole arrays {row['whole_array_within_s']:.3f} s "
              f"(x{row['speedup']:.2f}); outside: judge {row['judge_outside_s']:.3f} s", flush=True)
    speedups = [f["speedup"] for f in figures]
    data = make_result("judge-speed", get_backend("mlx-cpu"), figures, shapes, sorted(dtypes),
                       summary={"geomean_speedup_within": geomean(speedups)},
                       notes="seconds to judge one output within tolerance: judge() (chunked) and the whole-array "
                             "check, alternated in one process; medians of the repeats; host only")
    print(write_result(data, args.out))


if __name__ == "__main__":
    main()
