"""One GPU call for the wgmma prefill kernel (ksearch/kernels/attention/wgmma.py): which configurations are correct,
then their speed against cuDNN (MLX's native attention) and our mma.sync kernel, interleaved in one process.

    python benchmarks/attention_wgmma_check.py OUT_DIR [CONFIG ...]

A configuration is "wgW_nN" (the synchronous kernel, attention/wgmma.py: W warpgroups, N keys per tile) or
"wsW_nN_sS[_pP][_bulk|_tma|_tmac|_tmas][_pp]" (attention/wgmma_ws.py: S stages, P producer warps, P=0 every thread
loads with mbarriers only; _bulk: K / V by bulk copies from tile images; _tma / _tmac / _tmas: by tensor copies through
a map encoded on the host, one a tile / one per 16-byte column / one per 64 columns with the 128-byte swizzle; _pp:
ping-pong between the consumer warpgroups).

Each configuration's correctness runs in a subprocess of its own (a bad kernel can fault the GPU context), with a time
limit; results go to OUT_DIR/wgmma-check.json as they come.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

CONFIGS = ["ws3_n64_s4_p4_bulk", "ws3_n64_s3_p4", "wg3_n64", "wg3_n64_ca"]  # the default first
# (dtype, D, Hq, Hkv, L, S, causal): GQA, both head dims and dtypes, causal with S > L (the mask's shift)
CASES = [("float16", 128, 8, 2, 768, 768, False), ("float16", 128, 8, 2, 768, 768, True),
         ("bfloat16", 64, 8, 8, 768, 768, True), ("float16", 128, 4, 1, 384, 768, True),
         ("float16", 128, 32, 8, 1536, 1536, False), ("float16", 128, 8, 2, 1024, 1024, True),
         ("bfloat16", 64, 8, 8, 1024, 1024, False)]  # L=1024: a partial last block at 192 rows a block


LENGTHS = [int(x) for x in os.environ.get("KS_CHECK_LENGTHS", "2048,4096,8192").split(",")]


def kernel(name: str):  # type: ignore[no-untyped-def]
    """name -> (fn(q, k, v, causal), supports(q, k, v, causal))."""
    from ksearch.kernels.attention import wgmma as W
    from ksearch.kernels.attention import wgmma_ws as WS

    c = WS.parse_config(name)
    if isinstance(c, W.WgmmaConfig):
        return (lambda q, k, v, causal: W.attention_wgmma(q, k, v, causal, c)), (lambda *a: W.supports(*a, c))
    return (lambda q, k, v, causal: WS.attention_wgmma_ws(q, k, v, causal, c)), (lambda *a: WS.supports(*a, c))


def check_one(name: str) -> dict:
    import mlx.core as mx

    fn, _ = kernel(name)
    out = {}
    for dt, d, hq, hkv, length, s, causal in CASES:
        dtype = getattr(mx, dt)
        mx.random.seed(0)
        q = mx.random.normal((1, hq, length, d)).astype(dtype)
        k = mx.random.normal((1, hkv, s, d)).astype(dtype)
        v = mx.random.normal((1, hkv, s, d)).astype(dtype)
        ref = mx.fast.scaled_dot_product_attention(q.astype(mx.float32), k.astype(mx.float32), v.astype(mx.float32),
                                                   scale=d ** -0.5, mask="causal" if causal else None)
        got = [fn(q, k, v, causal) for _ in range(4)]  # a race between warps shows as runs that differ
        key = f"{dt}_d{d}_Hq{hq}_Hkv{hkv}_L{length}_S{s}_{'causal' if causal else 'full'}"
        out[key] = float(mx.max(mx.abs(got[0].astype(mx.float32) - ref)))
        out[key + "_runs_differ"] = float(max(mx.max(mx.abs(g.astype(mx.float32) - got[0].astype(mx.float32)))
                                              for g in got[1:]))
    return out


def bench(configs: list[str]) -> list[dict]:
    import statistics

    import mlx.core as mx

    from ksearch.bench.timing import time_rounds
    from ksearch.kernels.attention import native_attention
    from ksearch.kernels.attention.mma_sync import PrefillConfig, attention_cuda

    rows = []
    for d, hkv in ((128, 8), (64, 32)):
        for length in LENGTHS:
            for causal in (False, True):
                q = mx.random.normal((1, 32, length, d)).astype(mx.float16)
                k = mx.random.normal((1, hkv, length, d)).astype(mx.float16)
                v = mx.random.normal((1, hkv, length, d)).astype(mx.float16)
                mx.eval(q, k, v)
                a = (q, k, v, causal)  # bound now: the lambdas run within this iteration only
                fns = {name: (lambda a=a, f=kernel(name)[0]: f(*a)) for name in configs if kernel(name)[1](*a)}
                fns["mma_sync"] = lambda a=a: attention_cuda(*a, PrefillConfig(128, 64, True))
                fns["native"] = lambda a=a: native_attention(*a)
                times = time_rounds(fns, rounds=5, n=3, warmup=3)
                flops = 4 * 32 * length * length * d * (0.5 if causal else 1.0)
                med = {n: statistics.median(t) for n, t in times.items()}
                row = {"D": d, "Hkv": hkv, "L": length, "causal": causal,
                       **{f"{n}_tflops": round(flops / m / 1e12, 1) for n, m in med.items()}}
                best = min((m, n) for n, m in med.items() if n not in ("native", "mma_sync"))
                row["best"], row["best_vs_native"] = best[1], round(med["native"] / best[0], 3)
                rows.append(row)
                print(row, flush=True)
    return rows


def main(out_dir: str, configs: list[str]) -> None:
    path = os.path.join(out_dir, "wgmma-check.json")
    res: dict = {"device": "NVIDIA H200", "configs": {}}
    for key in configs:
        try:
            proc = subprocess.run([sys.executable, __file__, "--one", key],
                                  capture_output=True, text=True, timeout=int(os.environ.get("KS_CHECK_TIMEOUT", "120")))
            lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
            res["configs"][key] = json.loads(lines[-1]) if lines else {"error": proc.stderr[-800:]}
        except subprocess.TimeoutExpired:
            res["configs"][key] = {"error": "timed out (hang?)"}
        print(key, res["configs"][key], flush=True)
        with open(path, "w") as fh:
            json.dump(res, fh, indent=1)
    good = [c for c in configs if "error" not in (r := res["configs"][c]) and max(r.values()) < 2e-2]
    res["correct"] = good
    if good:
        import mlx.core as mx

        res["mlx"] = mx.__version__
        res["bench"] = bench(good)
    with open(path, "w") as fh:
        json.dump(res, fh, indent=1)


if __name__ == "__main__":
    if sys.argv[1] == "--one":
        print(json.dumps(check_one(sys.argv[2])))
    else:
        main(sys.argv[1], sys.argv[2:] or CONFIGS)
