"""Float32 prefill: the 3xTF32 tensor-core kernel (kernels/attention/tf32x3.py) checked and timed.

    python benchmarks/prefill_fp32.py check [--first N]         # against a true fp32 reference (TF32 off)
    python benchmarks/prefill_fp32.py bench OUT_DIR [--first N] [--tf32-off]  # beside MLX's float32 attention

--first N: the first N shapes of the list only (the holdout shape comes first in `bench`'s).

Both take the kernel's forms: the first ("plain"), the fragment layouts (`Tf32Config(frag=True)`, "frag") and the
same with 128 rows a block ("frag128"), each with Q's fragments in registers at D=64; a row's top-level figures are
the default's (`default_config`: frag at D=64, frag128 at D=128).

`check` sets MLX_ENABLE_TF32=0 before MLX loads, so that the reference's matmuls are fp32 (MLX runs float32 matmuls
on CUDA as TF32 by default); every case is held to the float32 tolerance of the tasks (1e-4 absolute + 1e-4
relative), partial tiles, GQA and the mask among them, and so is the library's `attention` as its dispatch takes it
for these inputs (the 3xTF32 kernel where `tf32x3_preferred` takes it, with TF32 off wherever it fits from L = S =
128; else MLX's, at fp32's accuracy with TF32 off). `bench` leaves MLX as a user has it (TF32 on): native is
`mx.fast.scaled_dot_product_attention`, which for float32 runs two TF32 matmuls and a softmax; each shape's row also
records how far native's output lies from the default's (within fp32's error: that is native's TF32 error), and
writes `attention-prefill-fp32-<device>.json` (ksearch-bench/1). `bench --tf32-off` sets MLX_ENABLE_TF32=0 as
`check` does, so that native is MLX's float32 attention at fp32's accuracy, as a user who turns TF32 off has it
(`attention-prefill-fp32-tf32-off-<device>.json`).
"""

from __future__ import annotations

import os
import sys
from functools import partial

MODE = sys.argv[1] if len(sys.argv) > 1 else ""
TF32_OFF = MODE == "check" or "--tf32-off" in sys.argv
if TF32_OFF:
    os.environ["MLX_ENABLE_TF32"] = "0"

import mlx.core as mx  # noqa: E402

from ksearch.bench.attention import prefill_inputs  # noqa: E402
from ksearch.kernels.attention import prefill_plan  # noqa: E402
from ksearch.kernels.attention.tf32x3 import Tf32Config, attention_tf32x3, default_config  # noqa: E402
from ksearch.tasks.attention import TASK  # noqa: E402
from ksearch.tasks.attention import reference as task_reference  # noqa: E402

# (B, Hq, Hkv, L, S, D, causal): the attention task's fp32 holdout workload first, then the benchmark's shapes at
# fp32, short calls (L 128-512) and partial blocks and tiles.
BENCH = [(1, 32, 8, 2048, 2048, 128, False), (1, 32, 8, 2048, 2048, 128, True), (1, 32, 8, 4096, 4096, 128, False),
         (1, 32, 8, 4096, 4096, 128, True), (4, 32, 8, 2048, 2048, 128, False), (2, 32, 32, 2048, 2048, 64, False),
         (2, 32, 32, 2048, 2048, 64, True), (1, 32, 8, 8192, 8192, 64, False), (1, 32, 8, 512, 512, 128, False),
         (1, 32, 8, 512, 512, 128, True), (4, 8, 8, 128, 128, 64, True), (1, 32, 8, 256, 256, 64, False)]
CHECK = [(1, 4, 2, 128, 128, 64, False), (1, 4, 2, 128, 128, 64, True), (2, 4, 1, 100, 77, 128, False),
         (1, 8, 2, 77, 300, 128, True), (1, 6, 3, 333, 333, 64, True), (1, 4, 4, 1, 50, 128, False),
         (1, 4, 4, 1, 50, 128, True), (1, 32, 8, 2048, 2048, 128, False), (1, 8, 8, 1024, 1024, 128, True),
         (2, 8, 2, 512, 1024, 64, True), (1, 8, 2, 2048, 2048, 64, False), (1, 4, 4, 2048, 2560, 128, True)]


def forms(d: int) -> dict[str, Tf32Config]:
    """The kernel's forms at head dim d: "plain" (the first form), "frag" (the fragment layouts) and "frag128" (the
    same with 128 rows a block, 8 warps sharing each K / V tile); the default (`default_config`) is one of them."""
    named = {"plain": Tf32Config(qreg=d == 64), "frag": Tf32Config(qreg=d == 64, frag=True),
             "frag128": Tf32Config(bm=128, qreg=d == 64, frag=True)}
    assert default_config(d) in named.values()
    return named


def default_form(d: int) -> str:
    return next(f for f, c in forms(d).items() if c == default_config(d))


def excess(out: mx.array, ref: mx.array) -> float:
    """The largest |out - ref| / (atol + rtol |ref|) with the attention task's float32 tolerance (1e-4, 1e-4): at
    most 1 within it."""
    atol, rtol = TASK.tolerance("float32")
    return float(mx.max(mx.abs(out - ref) / (atol + rtol * mx.abs(ref))).item())


def inputs(b: int, hq: int, hkv: int, length: int, s: int, d: int) -> tuple[mx.array, mx.array, mx.array]:
    return prefill_inputs((b, hq, length, d), (b, hkv, s, d), mx.float32)


def first(shapes: list[tuple[int, ...]]) -> list[tuple[int, ...]]:
    """The shapes `--first N` keeps (all without it); exits in one line for a bad N."""
    if "--first" not in sys.argv:
        return shapes
    at = sys.argv.index("--first") + 1
    if at >= len(sys.argv) or not sys.argv[at].isdigit() or int(sys.argv[at]) < 1:
        sys.exit("--first takes a positive number of shapes, e.g. --first 2")
    return shapes[: int(sys.argv[at])]


def check() -> int:
    bad = 0
    for shape in first(CHECK):
        b, hq, hkv, length, s, d, causal = shape
        q, k, v = inputs(b, hq, hkv, length, s, d)
        ref = task_reference({"q": q, "k": k, "v": v}, causal)[0]
        calls = {form: partial(attention_tf32x3, q, k, v, causal, cfg) for form, cfg in forms(d).items()}
        name, library = prefill_plan(q, k, v, causal)
        calls[f"library ({name})"] = library
        for form, call in calls.items():
            e = excess(call(), ref)
            bad += not e <= 1.0
            print(f"fp32 {form} {shape}: {e:.3f} of the tolerance {'ok' if e <= 1.0 else 'FAIL'}", flush=True)
    print(f"fp32: {bad} failures", flush=True)
    return 1 if bad else 0


def bench(out_dir: str) -> int:
    from ksearch.backends import get_backend
    from ksearch.bench.results import make_result, write_result
    from ksearch.bench.timing import geomean, latency_stats, ratio_stats, time_rounds
    from ksearch.kernels.attention import native_attention

    rows, shapes = [], first(BENCH)
    for shape in shapes:
        b, hq, hkv, length, s, d, causal = shape
        q, k, v = inputs(b, hq, hkv, length, s, d)
        cfgs, ours = forms(d), default_form(d)
        native = native_attention(q, k, v, causal)
        apart = excess(native, attention_tf32x3(q, k, v, causal, cfgs[ours]))
        calls = {f: partial(attention_tf32x3, q, k, v, causal, c) for f, c in cfgs.items()}
        times = time_rounds({**calls, "native": partial(native_attention, q, k, v, causal)}, rounds=15, round_s=0.02)
        flops = 4.0 * b * hq * length * s * d / (2 if causal else 1)
        row = {"shape": list(shape), "default": ours, **latency_stats(times[ours]),
               "native_latency_s": latency_stats(times["native"])["latency_s"],
               **ratio_stats(times[ours], times["native"]),
               "tflops": flops / latency_stats(times[ours])["latency_s"] / 1e12,
               "native_apart_of_tolerance": apart,
               **{f: {**ratio_stats(times[f], times["native"]),
                      "tflops": flops / latency_stats(times[f])["latency_s"] / 1e12} for f in cfgs}}
        rows.append(row)
        each = "".join(f"; {f} {row[f]['speedup']:.2f}x, {row[f]['tflops']:.1f} TFLOP/s" for f in cfgs)
        print(f"{shape}: the default ({ours}) {row['latency_s'] * 1e3:.3f} ms vs native "
              f"{row['native_latency_s'] * 1e3:.3f} ms -> {row['speedup']:.2f}x{each}; native {apart:.1f}x the fp32 "
              "tolerance from the default", flush=True)
    summary = {"geomean_speedup": geomean([r["speedup"] for r in rows]),
               **{f"{f}_geomean_speedup": geomean([r[f]["speedup"] for r in rows]) for f in forms(64)}}
    print("geomean " + ", ".join(f"{k.removesuffix('_geomean_speedup')} {v:.3f}x" for k, v in summary.items()),
          flush=True)
    name, native_is = (("attention-prefill-fp32-tf32-off", "MLX_ENABLE_TF32=0 (fp32 matmuls)") if TF32_OFF
                       else ("attention-prefill-fp32", "MLX's defaults (TF32 matmuls)"))
    data = make_result(name, get_backend(None), rows, [list(s) for s in shapes], ["float32"], summary,
                       f"3xTF32 kernel (tf32x3.py) beside MLX's float32 attention with {native_is}")
    print(f"wrote {write_result(data, out_dir)}")
    return 0


if __name__ == "__main__":
    if MODE == "check":
        sys.exit(check())
    if MODE == "bench" and len(sys.argv) > 2 and not sys.argv[2].startswith("--"):
        sys.exit(bench(sys.argv[2]))
    sys.exit(__doc__)
