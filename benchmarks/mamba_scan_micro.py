"""Micro benchmark of the Mamba kernels on one GPU, in one process, contenders interleaved:
- selective scan (B=1, D=2048, N=16, fp16, L=512..4096): the naive starter (one thread per channel), our library
  kernel, and a few renders of the selective_scan.cuda.chunked template family;
- decode step (selective_state_update, mamba-370m sizes, batch 1/8/16): naive starter, mlx-lm-style ops
  (community), our fused kernel.
Every contender is checked against the task reference first (max abs error in the figures).

    python benchmarks/mamba_scan_micro.py --out benchmarks/results
"""

from __future__ import annotations

import argparse
import statistics
from typing import Any

import mlx.core as mx
import numpy as np

from ksearch.backends import best_backend
from ksearch.bench.results import make_result, write_result
from ksearch.bench.timing import latency_stats, time_rounds
from ksearch.policy.templates.selective_scan import CUDA_FAMILY
from ksearch.tasks import get_task
from ksearch.tasks.base import Workload
from ksearch.tasks.inputs import make_inputs


def load_source(src: str) -> Any:
    ns: dict[str, Any] = {}
    exec(compile(src, "<candidate>", "exec"), ns)
    return ns["run"]


def timeit(fns: dict[str, Any], inputs: dict[str, Any], reps: int = 7, inner: int = 10) -> dict[str, list[float]]:
    """Per-call latency: `reps` interleaved rounds of `inner` calls, each call evaluated before the next."""
    calls = {name: (lambda fn=fn: fn(**inputs)) for name, fn in fns.items()}
    return time_rounds(calls, rounds=reps, n=inner, warmup=1, eval_each=True)


def max_err(got: Any, ref: Any) -> float:
    got = got if isinstance(got, (tuple, list)) else (got,)
    return max(float(np.max(np.abs(np.array(g.astype(mx.float32)) - np.array(r)))) for g, r in zip(got, ref, strict=True))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--lengths", default="512,1024,2048,4096")
    ap.add_argument("--out", default="benchmarks/results")
    a = ap.parse_args()
    from ksearch.kernels import selective_scan, selective_state_update

    backend = best_backend()
    fam = backend.family
    figures: list[dict[str, Any]] = []
    scan = get_task("selective_scan")
    variants = {"naive": load_source(scan.baseline("naive").source_for(fam) or ""),
                "ksearch": lambda **kw: selective_scan(**kw)}
    if fam == "cuda":
        for p in ({}, {"carry": "warp_shuffle", "channels": 8}, {"channels": 32, "chunks": 16},
                  {"exp2": False}):
            variants["tmpl:" + ",".join(f"{k}={v}" for k, v in p.items()) or "tmpl:default"] = load_source(
                CUDA_FAMILY.source(p))
    for length in (int(x) for x in a.lengths.split(",")):
        w = Workload(f"b1_d2048_l{length}_f16", {"batch": 1, "dim": 2048, "N": 16, "L": length}, "float16",
                     tier="gpu")
        inputs = make_inputs(scan, w, seed=1)
        ref = [np.array(r) for r in scan.reference({k: v.astype(mx.float32) for k, v in inputs.items()})]
        errs = {name: max_err(fn(**inputs), ref) for name, fn in variants.items()}
        times = timeit(variants, inputs)
        for name, ts in times.items():
            med = statistics.median(ts)
            figures.append({"kernel": "selective_scan", "contender": name, "L": length, **latency_stats(ts),
                            "max_abs_err": errs[name],
                            "gbs": scan.bytes_moved(w) / med / 1e9,
                            "ratio_vs_naive": statistics.median(times["naive"]) / med})
            print(f"scan L={length:5d} {name:40s} {med * 1e6:9.1f} us  err {errs[name]:.2e}")
    ssu = get_task("selective_state_update")
    step = {"naive": load_source(ssu.baseline("naive").source_for(fam) or ""),
            "community": load_source(ssu.baseline("community").source_for(fam) or ""),
            "ksearch": lambda **kw: selective_state_update(**kw)}
    for w in [x for x in ssu.workloads if x.tier == "gpu" and x.dtype == "float16"]:
        inputs = make_inputs(ssu, w, seed=1)
        ref = [np.array(r) for r in ssu.reference({k: v.astype(mx.float32) for k, v in inputs.items()})]
        errs = {name: max_err(fn(**inputs), ref) for name, fn in step.items()}
        times = timeit(step, inputs, inner=50)
        for name, ts in times.items():
            med = statistics.median(ts)
            figures.append({"kernel": "selective_state_update", "contender": name, "workload": w.name,
                            "batch": w.axes["batch"], **latency_stats(ts), "max_abs_err": errs[name],
                            "ratio_vs_community": statistics.median(times["community"]) / med})
            print(f"step {w.name:20s} {name:12s} {med * 1e6:9.1f} us  err {errs[name]:.2e}")
    summary = {f"{f['kernel']}_{f['contender']}_{f.get('L', f.get('workload'))}_ratio":
               f.get("ratio_vs_naive", f.get("ratio_vs_community")) for f in figures if f["contender"] == "ksearch"}
    data = make_result("selective_scan-micro", backend, figures,
                       [{"scan": "B1 D2048 N16", "lengths": a.lengths}, {"step": "mamba-370m, batch 1/8/16"}],
                       ["float16"], summary,
                       "Per-call latency (median of 7 interleaved repetitions of 10-50 calls, each evaluated). "
                       "Errors are max abs vs the task reference in float32.")
    print("wrote", write_result(data, a.out))


if __name__ == "__main__":
    main()
