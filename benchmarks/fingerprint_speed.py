"""How long the parent takes to check a timed call's outputs against the worker's commitment (harness/digest.py:
fingerprint_numpy), at the sizes of the GPU workloads' outputs, side by side in one process: the fingerprint over
cache-sized chunks with each size's position keys kept, against the same function in whole-array passes (its
definition, as it was computed before). Per task and GPU-tier search workload: the first check of a size (its keys
made), then the median of `--repeat` checks, alternated with the whole-array passes; both must give the same hex.

    python benchmarks/fingerprint_speed.py [--tasks softmax attention rmsnorm gqa_decode] [--repeat 7]
                                           [--out benchmarks/results]

No GPU needed: the parent checks commitments in NumPy on the host. Writes `fingerprint-speed-mlx-cpu-<device>.json`.
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
from ksearch.harness import digest


def whole_array(arrays: list[np.ndarray]) -> str:
    """fingerprint_numpy's function in whole-array passes (positions made anew every call, 64-bit sums)."""
    lanes = [0, 0]
    with np.errstate(over="ignore"):
        for k, a in enumerate(arrays):
            flat = np.ascontiguousarray(a).reshape(-1)
            size = flat.dtype.itemsize
            w = (flat.astype(np.uint32) if flat.dtype == np.bool_ else flat.view(np.uint32) if size in (4, 8)
                 else flat.view({2: np.uint16, 1: np.uint8}[size]).astype(np.uint32))
            i = np.arange(w.size, dtype=np.uint32) * np.uint32(digest._M0) + np.uint32(
                (k * digest._M3 + 1) & 0xFFFFFFFF)
            i = (i ^ (i >> np.uint32(15))) * np.uint32(digest._M2)
            h = (w ^ i) * np.uint32(digest._M1)
            h ^= h >> np.uint32(15)
            lanes[0] = (lanes[0] + int(h.sum(dtype=np.uint64))) & 0xFFFFFFFF
            lanes[1] = (lanes[1] + int((h * np.uint32(digest._M3)).sum(dtype=np.uint64))) & 0xFFFFFFFF
    return digest.fingerprint_hex(lanes)


def sent(values: np.ndarray, dtype: str) -> np.ndarray:
    """What the worker sends for an output of `dtype`: float16 and float32 as they are, bfloat16 as its uint16 words."""
    if dtype == "float16":
        return values.astype(np.float16)
    if dtype == "bfloat16":
        return (values.view(np.uint32) >> np.uint32(16)).astype(np.uint16)
    return values


def main() -> None:
    args = parse(__doc__.splitlines()[0], ["softmax", "attention", "rmsnorm", "gqa_decode"])
    rng = np.random.default_rng(0)
    figures: list[dict[str, Any]] = []
    shapes: list[dict[str, Any]] = []
    dtypes: set[str] = set()
    for task, w in gpu_search_workloads(args.tasks):
        outs = [sent(rng.standard_normal(spec.resolved_shape(w), dtype=np.float32), spec.resolved_dtype(w))
                for spec in task.outputs]
        dtypes.update(spec.resolved_dtype(w) for spec in task.outputs)
        digest._position_keys_np.clear()
        t0 = time.perf_counter()
        first = digest.fingerprint_numpy(outs)
        first_s = time.perf_counter() - t0
        chunked, whole = [], []
        for _ in range(args.repeat):
            t0 = time.perf_counter()
            a = digest.fingerprint_numpy(outs)
            t1 = time.perf_counter()
            b = whole_array(outs)
            t2 = time.perf_counter()
            assert a == b == first, (a, b, first)
            chunked.append(t1 - t0)
            whole.append(t2 - t1)
        row: dict[str, Any] = {"task": task.name, "workload": w.name, "values": int(sum(o.size for o in outs)),
                               "first_check_s": first_s, "check_s": statistics.median(chunked),
                               "whole_array_s": statistics.median(whole)}
        row["speedup"] = row["whole_array_s"] / row["check_s"]
        row["first_check_speedup"] = row["whole_array_s"] / first_s
        figures.append(row)
        shapes.append({"task": task.name, "workload": w.name, **dict(w.axes)})
        print(f"{task.name} {w.name}: {row['check_s']:.3f} s (first {first_s:.3f} s) against "
              f"{row['whole_array_s']:.3f} s: {row['speedup']:.2f}x", flush=True)
    speedups = [r["speedup"] for r in figures]
    summary = {"geomean_speedup": geomean(speedups), "min_speedup": min(speedups), "max_speedup": max(speedups),
               "geomean_first_check_speedup": geomean([r["first_check_speedup"] for r in figures])}
    print(summary)
    notes = ("Host-side check of a timed call's outputs against its commitment, single process, medians of "
             f"{args.repeat} alternated; outputs at the GPU search workloads' sizes with random values. A search's "
             "evaluator keeps the position keys across evaluations, so its checks after the first are `check_s`.")
    result = make_result("fingerprint-speed", get_backend("mlx-cpu"), figures, shapes, sorted(dtypes), summary, notes)
    print(write_result(result, args.out))


if __name__ == "__main__":
    main()
