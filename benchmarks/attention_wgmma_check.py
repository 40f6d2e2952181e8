"""One GPU call for the wgmma prefill kernel (ksearch/kernels/attention_wgmma.py), never run before: which layout
variant is correct, then its speed against cuDNN and our mma.sync kernel, interleaved in one process.

    python benchmarks/attention_wgmma_check.py OUT_DIR

Each variant's correctness runs in a subprocess of its own (a wrong descriptor can fault the GPU context), with a
time limit; results go to OUT_DIR/wgmma-check.json as they come.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

VARIANTS = [(wg, vmode, swap) for vmode in (1, 0) for swap in (False, True) for wg in (1, 2)]


def check_one(wg: int, vmode: int, swap: bool) -> dict:
    import mlx.core as mx

    from ksearch.kernels.attention_wgmma import WgmmaConfig, attention_wgmma

    cfg = WgmmaConfig(wg=wg, vmode=vmode, ls_swap=swap)
    out = {}
    for dt, d, causal in (("float16", 128, False), ("float16", 128, True), ("bfloat16", 64, True)):
        dtype = getattr(mx, dt)
        mx.random.seed(0)
        q = mx.random.normal((1, 8, 512, d)).astype(dtype)
        k = mx.random.normal((1, 2, 512, d)).astype(dtype)
        v = mx.random.normal((1, 2, 512, d)).astype(dtype)
        ref = mx.fast.scaled_dot_product_attention(q.astype(mx.float32), k.astype(mx.float32), v.astype(mx.float32),
                                                   scale=d ** -0.5, mask="causal" if causal else None)
        got = attention_wgmma(q, k, v, causal, cfg).astype(mx.float32)
        out[f"{dt}_d{d}_{'causal' if causal else 'full'}"] = float(mx.max(mx.abs(got - ref)))
    return out


def bench(variant: tuple[int, int, bool]) -> list[dict]:
    import statistics
    import time

    import mlx.core as mx

    from ksearch.kernels.attention import native_attention
    from ksearch.kernels.attention_cuda import PrefillConfig, attention_cuda
    from ksearch.kernels.attention_wgmma import WgmmaConfig, attention_wgmma

    cfg = WgmmaConfig(wg=variant[0], vmode=variant[1], ls_swap=variant[2])
    rows = []
    for length in (2048, 4096, 8192):
        for causal in (False, True):
            q = mx.random.normal((1, 32, length, 128)).astype(mx.float16)
            k = mx.random.normal((1, 8, length, 128)).astype(mx.float16)
            v = mx.random.normal((1, 8, length, 128)).astype(mx.float16)
            mx.eval(q, k, v)
            a = (q, k, v, causal)  # bound now: the lambdas run within this iteration only
            fns = {"wgmma": lambda a=a: attention_wgmma(*a, cfg),
                   "mma_sync": lambda a=a: attention_cuda(*a, PrefillConfig(128, 64, True)),
                   "native": lambda a=a: native_attention(*a)}
            times: dict[str, list[float]] = {n: [] for n in fns}
            for r in range(6):
                for name, fn in fns.items():
                    mx.synchronize()
                    t0 = time.perf_counter()
                    mx.eval([fn() for _ in range(3)])
                    mx.synchronize()
                    if r:
                        times[name].append((time.perf_counter() - t0) / 3)
            flops = 4 * 32 * length * length * 128 * (0.5 if causal else 1.0)
            med = {n: statistics.median(t) for n, t in times.items()}
            rows.append({"L": length, "causal": causal, **{f"{n}_s": m for n, m in med.items()},
                         **{f"{n}_tflops": flops / m / 1e12 for n, m in med.items()},
                         "wgmma_vs_native": med["native"] / med["wgmma"]})
            print(rows[-1], flush=True)
    return rows


def main(out_dir: str) -> None:
    path = os.path.join(out_dir, "wgmma-check.json")
    res: dict = {"variants": {}}
    for wg, vmode, swap in VARIANTS:
        key = f"wg{wg}_v{vmode}_s{int(swap)}"
        try:
            proc = subprocess.run([sys.executable, __file__, "--one", str(wg), str(vmode), str(int(swap))],
                                  capture_output=True, text=True, timeout=90)
            lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
            res["variants"][key] = json.loads(lines[-1]) if lines else {"error": proc.stderr[-800:]}
        except subprocess.TimeoutExpired:
            res["variants"][key] = {"error": "timed out (hang?)"}
        print(key, res["variants"][key], flush=True)
        with open(path, "w") as fh:
            json.dump(res, fh, indent=1)
    good = [k for k, r in res["variants"].items() if "error" not in r and max(r.values()) < 2e-2]
    res["correct_variants"] = good
    if good:
        wg, vmode, swap = next((w, m, s) for w, m, s in VARIANTS if f"wg{w}_v{m}_s{int(s)}" == good[0])
        res["bench_variant"] = good[0]
        res["bench"] = bench((wg, vmode, swap))
    with open(path, "w") as fh:
        json.dump(res, fh, indent=1)


if __name__ == "__main__":
    if sys.argv[1] == "--one":
        print(json.dumps(check_one(int(sys.argv[2]), int(sys.argv[3]), sys.argv[4] == "1")))
    else:
        main(sys.argv[1])
