"""The prefill grid's block order, side by side in one process (interleaved rounds, bench attention's harness): the
library's order (causal: sections of heads whose K / V fit in L2, the longest query tiles of all of a section's heads
first; attention_cuda.sections) against one head a section (every tile of head 0, longest first, then head 1, ...:
the order before), and MLX's native attention, at every causal shape of the issue's grid (the order differs only
with a causal mask).

    python benchmarks/prefill_sections.py OUT_DIR
"""

from __future__ import annotations

import statistics
import sys
from typing import Any

import mlx.core as mx

from ksearch.backends import get_backend
from ksearch.commands.bench_attention import _geomean, _time_rounds, prefill_shapes
from ksearch.kernels import attention_cuda as AC
from ksearch.kernels.attention import attention, native_attention
from ksearch.report.benchjson import make_result, write_result


def measure(shape: dict[str, Any]) -> dict[str, Any]:
    dt = getattr(mx, shape["dtype"])
    b, hkv, d, length = shape["B"], shape["Hkv"], shape["D"], shape["L"]
    mx.random.seed(0)
    q = mx.random.normal((b, 32, length, d)).astype(dt)
    k = mx.random.normal((b, hkv, length, d)).astype(dt)
    v = mx.random.normal((b, hkv, length, d)).astype(dt)
    mx.eval(q, k, v)
    sections = AC.sections

    def one_head() -> Any:
        AC.sections = lambda *a, **kw: 1  # type: ignore[assignment]
        try:
            return attention(q, k, v, True)
        finally:
            AC.sections = sections

    fns = {"sections": lambda: attention(q, k, v, True), "one_head": one_head,
           "native": lambda: native_attention(q, k, v, True)}
    diff = float(mx.max(mx.abs(fns["sections"]().astype(mx.float32) - one_head().astype(mx.float32))).item())
    t = _time_rounds(fns, rounds=7, n=2, round_s=0.01)
    med = {n: statistics.median(x) for n, x in t.items()}
    sh = AC.sections(b * 32, 32 // hkv, 2 * length * d * dt.size, True)
    return {**shape, "heads_per_section": sh, "sections_us": med["sections"] * 1e6, "one_head_us": med["one_head"] * 1e6,
            "native_us": med["native"] * 1e6, "gain": med["one_head"] / med["sections"],
            "speedup_sections": med["native"] / med["sections"], "speedup_one_head": med["native"] / med["one_head"],
            "max_abs_diff_between_orders": diff}


def main() -> None:
    shapes = [s for s in prefill_shapes(full=True) if s["causal"]]
    rows = []
    for s in shapes:
        rows.append(measure(s))
        r = rows[-1]
        print(f"B{s['B']} Hkv{s['Hkv']} L{s['L']} D{s['D']} {s['dtype']}: sh={r['heads_per_section']} "
              f"{r['one_head_us']:.0f} -> {r['sections_us']:.0f} us ({r['gain']:.3f}x), native {r['native_us']:.0f} "
              f"us: {r['speedup_one_head']:.3f}x -> {r['speedup_sections']:.3f}x", flush=True)
    long = [r for r in rows if r["L"] >= 4096]
    summary = {"geomean_gain": _geomean([r["gain"] for r in rows]),
               "geomean_speedup_sections": _geomean([r["speedup_sections"] for r in rows]),
               "geomean_speedup_one_head": _geomean([r["speedup_one_head"] for r in rows]),
               "geomean_speedup_sections_L_ge_4096": _geomean([r["speedup_sections"] for r in long]),
               "geomean_speedup_one_head_L_ge_4096": _geomean([r["speedup_one_head"] for r in long])}
    print(summary)
    if len(sys.argv) > 1:
        data = make_result("prefill-sections", get_backend(None), rows, shapes, sorted({s["dtype"] for s in shapes}),
                           summary, "causal shapes only; 7 interleaved rounds of ~10 ms each; medians")
        print("wrote", write_result(data, sys.argv[1]))


if __name__ == "__main__":
    main()
