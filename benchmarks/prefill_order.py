"""The causal prefill's block order side by side in one process, interleaved rounds: blocks longest first across the
heads of an L2-sized section (attention/cuda_prefill.BLOCK_ORDER, the library's order), one head's tiles at a time
(the same grid with sections of one head, the order before sections), and MLX's native attention, at every causal
shape of `ksearch bench attention --full`, with the library's dispatch.

    python benchmarks/prefill_order.py OUT_DIR [--quick]     # --quick: B 1, fp16 only (12 shapes)

Writes prefill-order-*.json (ksearch-bench/1): per shape each order's latency and ratio to native, and their geomeans.
"""

from __future__ import annotations

import statistics
import sys
from typing import Any

import mlx.core as mx

from ksearch.backends import get_backend
from ksearch.bench.attention import _dtype, prefill_shapes
from ksearch.bench.results import make_result, write_result
from ksearch.bench.timing import geomean, ratio_stats, time_rounds
from ksearch.kernels.attention import attention, native_attention, prefill_plan
from ksearch.kernels.attention import cuda_prefill as AC

SECTIONS = AC.causal_section


def one_head(b: int, hq: int, hkv: int, s: int, d: int, itemsize: int) -> int:
    return 1


def measure(shape: dict[str, Any]) -> dict[str, Any]:
    dt = _dtype(shape["dtype"])
    mx.random.seed(0)
    q = mx.random.normal((shape["B"], shape["Hq"], shape["L"], shape["D"])).astype(dt)
    k = mx.random.normal((shape["B"], shape["Hkv"], shape["S"], shape["D"])).astype(dt)
    v = mx.random.normal((shape["B"], shape["Hkv"], shape["S"], shape["D"])).astype(dt)
    mx.eval(q, k, v)

    def before(name: str) -> None:  # the order is chosen when the call is launched, so per round
        AC.causal_section = one_head if name == "one_head" else SECTIONS

    fns = {"sections": lambda: attention(q, k, v, True), "one_head": lambda: attention(q, k, v, True),
           "native": lambda: native_attention(q, k, v, True)}
    outs = {}
    for name in ("sections", "one_head"):
        before(name)
        outs[name] = attention(q, k, v, True)
        mx.eval(outs[name])
    AC.causal_section = SECTIONS
    same = bool(mx.array_equal(outs["sections"], outs["one_head"]).item())
    t = time_rounds(fns, rounds=7, n=2, round_s=0.01, before=before)
    AC.causal_section = SECTIONS
    row = {**shape, "kernel": prefill_plan(q, k, v, True)[0], "same_output": same,
           "native_latency_s": statistics.median(t["native"])}
    for name in ("sections", "one_head"):
        row[f"{name}_latency_s"] = statistics.median(t[name])
        row[f"{name}_speedup"] = ratio_stats(t[name], t["native"])["speedup"]
    row["sections_over_one_head"] = ratio_stats(t["sections"], t["one_head"])["speedup"]
    return row


def main(argv: list[str]) -> None:
    out, quick = argv[0], "--quick" in argv[1:]
    shapes = [s for s in prefill_shapes(full=True) if s["causal"]
              and (not quick or (s["B"] == 1 and s["dtype"] == "float16"))]
    rows = []
    for shape in shapes:
        rows.append(measure(shape))
        r = rows[-1]
        print(f"B{r['B']} H{r['Hq']}/{r['Hkv']} D{r['D']} L{r['L']} {r['dtype']}: sections {r['sections_speedup']:.3f}x "
              f"one head {r['one_head_speedup']:.3f}x of native; sections / one head {r['sections_over_one_head']:.3f}"
              f"{'' if r['same_output'] else ' OUTPUTS DIFFER'}", flush=True)
    summary = {key: geomean([r[key] for r in rows])
               for key in ("sections_speedup", "one_head_speedup", "sections_over_one_head")}
    summary["all_outputs_identical"] = all(r["same_output"] for r in rows)
    data = make_result("prefill-order", get_backend(None), rows, shapes, sorted({s["dtype"] for s in shapes}), summary,
                       "causal block order: sections of heads longest first vs one head at a time, one process")
    print(summary, "\nwrote", write_result(data, out))


if __name__ == "__main__":
    main(sys.argv[1:])
