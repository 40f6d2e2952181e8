"""The library decode's own Python work a call, on any machine: `decode()` with MLX's custom-kernel calls replaced
by stubs that hand back outputs made once (split-K's two, or the tensor-core kernel's where the dispatch takes it, as on
the H200), so what is timed is this package's dispatch and argument building plus
MLX's slice of K (the one array operation a call builds besides the kernels), not MLX's own cost of a kernel call.

At B 1 a decode call's host work is most of its time on the H200 (benchmarks/results/process-trace-*.json), so every
microsecond here is one a caller waits for. Runs on the CPU build of MLX too (the CUDA backend is pretended).

    python benchmarks/decode_host_work.py [--calls 3000] [--repeat 15] [--shapes 1x4096,16x32768] [--out DIR]

Per shape (Hq 32, Hkv 8, D 128, fp16; by default B 1 and 16 at lengths 4k and 32k): the best of `--repeat` loops of `--calls`
calls, per call (the contenders' loops in turn), for `decode()`, its plan alone and MLX's slice alone, and decode() in units of the slice (the
machine's own speed moves between processes; the ratio moves less). Writes decode-host-work-*.json to DIR. The
script runs against earlier versions of the package too (`git checkout REV -- src`), for a before and after.
"""

from __future__ import annotations

import argparse
import importlib
import time
from collections.abc import Callable
from typing import Any


def per_call(fns: dict[str, Callable[[], Any]], calls: int, repeat: int) -> dict[str, float]:
    """Each function's best loop of `calls`, per call; the functions' loops in turn, `repeat` times, so that the
    machine's slow and fast stretches fall on all of them alike."""
    best = dict.fromkeys(fns, float("inf"))
    for _ in range(repeat):
        for name, fn in fns.items():
            t0 = time.perf_counter()
            for _ in range(calls):
                fn()
            best[name] = min(best[name], (time.perf_counter() - t0) / calls)
    return best


def measure(b: int, length: int, calls: int, repeat: int) -> dict[str, Any]:
    """One shape's figures, MLX's kernel calls stubbed by callables that hand back outputs made once: split-K's split
    and merge kernels and the tensor-core kernel's (which the dispatch takes from 256 MiB of K/V over 64 pairs)."""
    import mlx.core as mx

    kd = importlib.import_module("ksearch.kernels.decode")
    ck = importlib.import_module("ksearch.kernels.decode.cuda_split_k")
    cc = importlib.import_module("ksearch.kernels.decode.cuda_cluster")
    q = mx.zeros((b, 32, 1, 128), dtype=mx.float16)
    kc, vc = (mx.zeros((b, 8, length + 256, 128), dtype=mx.float16) for _ in range(2))
    mx.eval(q, kc, vc)
    launch = ck.launch_for(q, kc, vc, kd.decode_config(q, kc, length))
    nsplit = launch.nsplit(length)
    parts = [mx.zeros((launch.blocks, nsplit, launch.g, 128)), mx.zeros((launch.blocks, nsplit, launch.g, 2))]
    out = [mx.zeros(q.shape, dtype=q.dtype)]
    # Any arguments: the kernels' makers have taken their constants as arguments since they are written into the text.
    stubs = {(ck, "_kernels"): lambda *a: (lambda **kw: parts, lambda **kw: out),
             (ck, "merge_kernel"): lambda *a: (lambda **kw: out),
             (cc, "_parts_kernel"): lambda *a: (lambda **kw: parts),
             (cc, "_kernel"): lambda *a: (lambda **kw: out)}
    real = {key: getattr(*key) for key in stubs if hasattr(*key)}
    # Every cache that may hold a launch made with the stubs (the names of earlier versions of the package too).
    caches = [f for f in (getattr(cc, "parts_launch", None), getattr(cc, "_parts_launch", None),
                          getattr(kd, "_mma_fits", None), getattr(kd, "_cuda_route", None)) if f is not None]
    made = getattr(launch, "made", [])  # where a launch keeps its kernels, it takes the stubs at its first call
    try:
        for (mod, name), stub in stubs.items():
            if (mod, name) in real:
                setattr(mod, name, stub)
        for f in caches:
            f.cache_clear()
        made.clear()
        times = per_call({"decode_s": lambda: kd.decode(q, kc, vc, length),
                          "plan_s": lambda: kd.decode_plan(q, kc, vc, length),
                          "slice_s": lambda: kc[:, :, :length]}, calls, repeat)
        row: dict[str, Any] = {"B": b, "length": length, "kernel": kd.decode_plan(q, kc, vc, length)[0], **times}
    finally:
        for (mod, name), fn in real.items():
            setattr(mod, name, fn)
        for f in caches:
            f.cache_clear()
        made.clear()
    # This machine's speed moves up to 2x from one process to the next: MLX's slice, timed beside, is the yardstick.
    row["decode_in_slices"] = row["decode_s"] / row["slice_s"]
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--calls", type=int, default=3000)
    ap.add_argument("--repeat", type=int, default=15)
    ap.add_argument("--shapes", default="1x4096,1x32768,16x4096,16x32768", help="BxLENGTH,...")
    ap.add_argument("--out", default=None, help="directory for decode-host-work-*.json (default: print only)")
    args = ap.parse_args()
    from ksearch.bench.attention import parse_batch_lengths

    try:
        shapes = parse_batch_lengths(args.shapes)
    except ValueError as exc:
        raise SystemExit(f"decode_host_work: {exc}") from None
    if args.calls < 1 or args.repeat < 1:
        raise SystemExit("decode_host_work: --calls and --repeat must be at least 1")
    from ksearch.backends import get_backend
    from ksearch.bench.results import make_result, write_result
    from ksearch.kernels import device

    figures = []
    real_backend, real_hopper = device.backend, device.hopper
    try:
        # The H200's dispatch: CUDA, and Hopper (the tensor-core kernel where the dispatch gives it the call).
        device.backend = lambda: "cuda"  # type: ignore[assignment]
        device.hopper = lambda: True  # type: ignore[assignment]
        for b, length in shapes:
            row = measure(b, length, args.calls, args.repeat)
            figures.append(row)
            print(f"B {b:>2} {length:>6} ({row['kernel']}): decode() {row['decode_s'] * 1e6:5.2f} us, plan {row['plan_s'] * 1e6:5.2f} "
                  f"us, MLX's slice {row['slice_s'] * 1e6:5.2f} us; decode() = {row['decode_in_slices']:.2f} slices",
                  flush=True)
    finally:
        device.backend, device.hopper = real_backend, real_hopper  # type: ignore[assignment]
    if args.out:
        data = make_result("decode-host-work", get_backend("mlx-cpu"), figures,
                           [[r["B"], r["length"]] for r in figures], ["float16"],
                           notes="decode() with MLX's custom-kernel calls stubbed: the package's Python work and "
                                 "MLX's slice of K a call; best of --repeat loops")
        print(write_result(data, args.out), flush=True)


if __name__ == "__main__":
    main()
