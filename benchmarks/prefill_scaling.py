"""Where a short prefill call's time goes: the library's prefill and cuDNN side by side in one process (interleaved
rounds, bench.timing.time_rounds) at one length while the number of query heads grows, so that the call's fixed cost
and its cost a wave of blocks separate. Per contender a least-squares line, latency = fixed + per_wave x waves, where
waves = ceil(blocks / SMs) and blocks = B x Hq x ceil(L / rows a block) of the library's configuration (for cuDNN the
same waves: a yardstick, not its own blocks).

    python benchmarks/prefill_scaling.py OUT_DIR [--lengths 2048,8192] [--dims 64,128] [--heads 4,8,16,32,64,128]
                                         [--causal]

Hq / Hkv = 4 (GQA), B 1, fp16. Writes prefill-scaling-*.json (ksearch-bench/1).
"""

from __future__ import annotations

import argparse
import statistics
from functools import partial
from typing import Any

import mlx.core as mx

from ksearch.backends import get_backend
from ksearch.bench.results import make_result, write_result
from ksearch.bench.timing import time_rounds
from ksearch.kernels.attention import attention, native_attention, prefill_plan, wgmma_config
from ksearch.kernels.attention.wgmma_ws import WsConfig

SMS = 132  # the H200's streaming multiprocessors


def rows_a_block(q: Any, k: Any, causal: bool) -> int:
    cfg = wgmma_config(q, k, causal)
    return 64 * cfg.wg if isinstance(cfg, WsConfig) else 128


def fit(waves: list[int], latency: list[float]) -> dict[str, float] | None:
    """latency = fixed + per_wave x waves by least squares (statistics.linear_regression); None where every head
    count filled as many waves (nothing to fit)."""
    if len(set(waves)) < 2:
        return None
    slope, intercept = statistics.linear_regression(waves, latency)
    return {"fixed_us": intercept * 1e6, "per_wave_us": slope * 1e6}


def measure(length: int, d: int, heads: list[int], causal: bool) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for hq in heads:
        mx.random.seed(0)
        q = mx.random.normal((1, hq, length, d)).astype(mx.float16)
        k = mx.random.normal((1, hq // 4, length, d)).astype(mx.float16)
        v = mx.random.normal((1, hq // 4, length, d)).astype(mx.float16)
        mx.eval(q, k, v)
        t = time_rounds({"ours": partial(attention, q, k, v, causal), "native": partial(native_attention, q, k, v, causal)},
                        rounds=7, n=2, round_s=0.01)
        blocks = hq * -(-length // rows_a_block(q, k, causal))
        out.append({"L": length, "D": d, "Hq": hq, "Hkv": hq // 4, "causal": causal, "blocks": blocks,
                    "waves": -(-blocks // SMS), "kernel": prefill_plan(q, k, v, causal)[0],
                    "latency_s": statistics.median(t["ours"]), "native_latency_s": statistics.median(t["native"])})
        r = out[-1]
        print(f"L {length} D {d} Hq {hq}: {r['blocks']} blocks, {r['waves']} waves, ours {r['latency_s'] * 1e6:.1f} us, "
              f"native {r['native_latency_s'] * 1e6:.1f} us", flush=True)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out")
    ap.add_argument("--lengths", default="2048,8192")
    ap.add_argument("--dims", default="64,128")
    ap.add_argument("--heads", default="4,8,16,32,64,128")
    ap.add_argument("--causal", action="store_true")
    args = ap.parse_args()
    try:
        lengths, dims, heads = ([int(x) for x in s.split(",")] for s in (args.lengths, args.dims, args.heads))
    except ValueError:
        raise SystemExit("prefill_scaling: --lengths, --dims and --heads take comma-separated integers") from None
    if any(h % 4 for h in heads) or len(heads) < 2:
        raise SystemExit("prefill_scaling: give two or more --heads, each a multiple of 4 (Hq / Hkv = 4)")
    rows, summary = [], {}
    for length in lengths:
        for d in dims:
            part = measure(length, d, heads, args.causal)
            rows += part
            waves = [r["waves"] for r in part]
            summary[f"L{length}_D{d}"] = {"ours": fit(waves, [r["latency_s"] for r in part]),
                                          "native": fit(waves, [r["native_latency_s"] for r in part])}
            print(f"L {length} D {d}: {summary[f'L{length}_D{d}']}", flush=True)
    data = make_result("prefill-scaling", get_backend(None), rows, [{"L": x, "D": d} for x in lengths for d in dims],
                       ["float16"], summary, "latency = fixed + per_wave x waves, per contender, B 1, Hq / Hkv 4")
    print("wrote", write_result(data, args.out))


if __name__ == "__main__":
    main()
