"""The one-launch cluster decode (ksearch/kernels/decode/cuda_cluster.py) on the GPU: correctness against fp32, then
its configurations side by side with the split-K kernel and native over `ksearch bench decode`'s shapes.

    python benchmarks/decode_cluster_check.py check           # every case against fp32; exit 1 on a failure
    python benchmarks/decode_cluster_check.py sweep OUT.json  # per shape: each configuration, split_k, native, interleaved

KSEARCH_CLUSTER_CONFIGS=5,3 keeps those configurations of CONFIGS only (by index). Run with MLX_USE_CUDA_GRAPHS=0:
MLX 0.32's CUDA graphs break later kernels without cluster dims once a cluster kernel has run (docs/kernels-decode.md).
"""

from __future__ import annotations

import json
import math
import os
import platform
import statistics
import sys

os.environ.setdefault("MLX_ENABLE_TF32", "0")  # the fp32 reference must be real fp32

import mlx.core as mx  # noqa: E402

from ksearch.bench.attention import decode_inputs, decode_shapes  # noqa: E402
from ksearch.bench.timing import geomean, ratio_stats, time_rounds  # noqa: E402
from ksearch.kernels.decode import native_decode  # noqa: E402
from ksearch.kernels.decode.cuda_cluster import ClusterConfig, cluster_size, decode_cluster  # noqa: E402
from ksearch.kernels.decode.cuda_split_k import DecodeConfig, decode_cuda  # noqa: E402

# Spelled out in full, so that the rows keep naming what was measured whatever the library default: index 5 is
# the default ClusterConfig().
CONFIGS = [ClusterConfig(consumers=4), ClusterConfig(consumers=4, slots=1), ClusterConfig(consumers=2, keys=64),
           ClusterConfig(consumers=4, producers=2), ClusterConfig(consumers=8, producers=2, keys=16),
           ClusterConfig(consumers=2), ClusterConfig(consumers=4, max_cluster=1)]
if os.environ.get("KSEARCH_CLUSTER_CONFIGS"):
    CONFIGS = [CONFIGS[int(i)] for i in os.environ["KSEARCH_CLUSTER_CONFIGS"].split(",")]


def ref(q, k, v):
    b, hq, _, d = q.shape
    g = hq // k.shape[1]
    k = mx.repeat(k.astype(mx.float32), g, axis=1)
    v = mx.repeat(v.astype(mx.float32), g, axis=1)
    s = (q.astype(mx.float32) @ k.transpose(0, 1, 3, 2)) / math.sqrt(d)
    return mx.softmax(s, axis=-1) @ v


def check() -> int:
    mx.random.seed(3)
    # (B, Hq, Hkv, capacity, length, D): one key, partial tiles, one tile per split, G of 1, 4, 8 and 16, long.
    cases = [(1, 8, 2, 64, 1, 128), (2, 8, 2, 1300, 1000, 128), (1, 8, 8, 600, 37, 64), (1, 32, 8, 4352, 4096, 128),
             (3, 16, 1, 9000, 8191, 128), (2, 32, 4, 2048, 2048, 64), (1, 32, 8, 33024, 32768, 128),
             (16, 32, 8, 4352, 4100, 128)]
    runs = [(CONFIGS[0], c, t, "dense") for c in cases for t in (mx.float16, mx.bfloat16)]
    runs += [(cfg, c, mx.float16, "dense") for cfg in CONFIGS[1:] for c in cases[1:5]]
    runs += [(CONFIGS[0], c, mx.float16, lay) for c in cases[1:4] for lay in ("token_major", "padded_rows")]
    bad = 0
    for cfg, (b, hq, hkv, cap, length, d), dt, layout in runs:
        q = mx.random.normal((b, hq, 1, d)).astype(dt)
        if layout == "token_major":  # (B, capacity, Hkv, D) seen as (B, Hkv, capacity, D): strided keys, still aligned
            kc = mx.random.normal((b, cap, hkv, d)).astype(dt).transpose(0, 2, 1, 3)
            vc = mx.random.normal((b, cap, hkv, d)).astype(dt).transpose(0, 2, 1, 3)
        elif layout == "padded_rows":  # rows of D + 4: not 16-byte aligned, must come out NaN, never wrong numbers
            kc = mx.random.normal((b, hkv, cap, d + 4)).astype(dt)[..., :d]
            vc = mx.random.normal((b, hkv, cap, d + 4)).astype(dt)[..., :d]
            q = mx.random.normal((b, hq, 1, d + 2)).astype(dt)[..., 1:d + 1]  # and q two bytes off its alignment
        else:
            kc = mx.random.normal((b, hkv, cap, d)).astype(dt)
            vc = mx.random.normal((b, hkv, cap, d)).astype(dt)
            kc[:, :, length:] = mx.nan  # garbage past the length must not leak in
            vc[:, :, length:] = mx.nan
        out = decode_cluster(q, kc, vc, length, cfg).astype(mx.float32)
        cs = cluster_size(b * hkv, length, d, hq // hkv, cfg)
        err = float(mx.max(mx.abs(out - ref(q, kc[:, :, :length], vc[:, :, :length]))).item())
        ok = err < (2e-2 if dt == mx.bfloat16 else 4e-3)
        if layout == "padded_rows":  # NaN from the kernel, or right numbers if MLX handed it a contiguous copy
            ok = ok or bool(mx.all(mx.isnan(out)).item())
        bad += not ok
        print(f"cluster {cfg} cs={cs} {(b, hq, hkv, cap, length, d)} {dt} {layout}: err {err:.2e} "
              f"{'ok' if ok else 'FAIL'}", flush=True)
    print(f"decode_cluster: {bad} failures of {len(runs)}", flush=True)
    return 1 if bad else 0


def sweep(out: str) -> None:
    rows = []
    for shape in decode_shapes(True):
        dt = getattr(mx, shape["dtype"])
        b, hq, hkv, d, n = (shape[k] for k in ("B", "Hq", "Hkv", "D", "length"))
        q, kc, vc = decode_inputs(shape)
        fns = {"native_slice": lambda: native_decode(q, kc, vc, n),  # noqa: B023 - used within the iteration
               "split_k": lambda: decode_cuda(q, kc, vc, n, DecodeConfig())}  # noqa: B023
        for i, cfg in enumerate(CONFIGS):
            fns[f"c{i}"] = lambda c=cfg: decode_cluster(q, kc, vc, n, c)  # noqa: B023
        t = time_rounds(fns, rounds=15, n=10)
        med = {k: statistics.median(v) for k, v in t.items()}
        kv = 2 * b * hkv * n * d * dt.size
        row = {**shape, "kv_bytes": kv, "latency_s": med,
               "gbs": {k: kv / v / 1e9 for k, v in med.items()},
               "vs_native": {k: ratio_stats(t[k], t["native_slice"]) for k in t if k != "native_slice"},
               "cluster": {f"c{i}": cluster_size(b * hkv, n, d, hq // hkv, c) for i, c in enumerate(CONFIGS)},
               "max_abs_diff_vs_native": {k: float(mx.max(mx.abs(fn().astype(mx.float32) - fns["native_slice"]()
                                                                  .astype(mx.float32))).item()) for k, fn in fns.items()}}
        print({k: f"{v:.1e}" for k, v in row["max_abs_diff_vs_native"].items()}, row["cluster"], flush=True)
        rows.append(row)
        best = max((k for k in med if k.startswith("c")), key=lambda k: -med[k])
        print(f"{shape['B']:>2} {n:>6} D{d} {shape['dtype']}: native {med['native_slice'] * 1e6:7.1f} us  split_k "
              f"{med['split_k'] * 1e6:7.1f}  " + "  ".join(f"{k} {med[k] * 1e6:6.1f}" for k in med if k.startswith("c"))
              + f"  | best {best} {med['native_slice'] / med[best]:.2f}x native, {row['gbs'][best]:.0f} GB/s", flush=True)
    geo = {k: geomean([r["vs_native"][k]["speedup"] for r in rows]) for k in rows[0]["vs_native"]}
    print("geomean vs native (cuDNN on slices):", {k: round(v, 3) for k, v in geo.items()}, flush=True)
    info = mx.device_info() if hasattr(mx, "device_info") else {}
    with open(out, "w") as fh:
        json.dump({"schema": "ksearch-bench/1", "kind": "decode-cluster-sweep", "mlx": mx.__version__,
                   "python": platform.python_version(), "device": str(info.get("device_name", "")),
                   "configs": {f"c{i}": repr(c) for i, c in enumerate(CONFIGS)}, "geomean_vs_native": geo,
                   "shapes": rows}, fh, indent=1)


if __name__ == "__main__":
    if sys.argv[1] == "check":
        sys.exit(check())
    sweep(sys.argv[2])
