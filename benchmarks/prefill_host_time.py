"""Host time of one prefill call: what the CPU spends building the call's graph (nothing evaluated), for the
library's dispatch (`attention`), its plan alone (`prefill_plan`), the Hopper kernel called with its configuration
(`attention_wgmma_ws`), and MLX's own custom-kernel call with a tiny source, with 60 KB of comment lines, and with
the prefill kernel's own text as written and as the library hands it (compacted): MLX writes the kernel's whole text
for every call. Where calls queue faster than the host makes them (B 1 at L 2048),
this is what a call costs. One process, B 1, Hq 8, Hkv 2, L 2048, D 128, fp16; microseconds a call over 2,000 calls.

    python benchmarks/prefill_host_time.py OUT_DIR

Writes prefill-host-time-*.json (ksearch-bench/1). MLX-CUDA only (custom kernels).
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

import mlx.core as mx

from ksearch.backends import get_backend
from ksearch.bench.results import make_result, write_result
from ksearch.bench.timing import build_us
from ksearch.kernels.attention import attention, prefill_plan, wgmma_config
from ksearch.kernels.attention import wgmma_ws as WS
from ksearch.kernels.attention.wgmma import launch_bounds
from ksearch.kernels.cuda_headers import WGMMA_HEADER
from ksearch.kernels.kernel_text import compact, cuda_kernel
from ksearch.kernels.tensor_map import TMA_HEADER


def main(out_dir: str) -> None:
    q = mx.random.normal((1, 8, 2048, 128)).astype(mx.float16)
    k = mx.random.normal((1, 2, 2048, 128)).astype(mx.float16)
    v = mx.random.normal((1, 2, 2048, 128)).astype(mx.float16)
    mx.eval(q, k, v, attention(q, k, v))
    mx.synchronize()
    cfg = wgmma_config(q, k, False)
    a = mx.zeros((4,), dtype=mx.float16)
    small = mx.fast.cuda_kernel(name="host_time_small", input_names=["a"], output_names=["o"], source="o[0] = a[0];")
    padded = mx.fast.cuda_kernel(name="host_time_padded", input_names=["a"], output_names=["o"],
                                 source="// pad\n" * 5000 + "o[0] = a[0];", header="// h\n" * 5000)
    # The prefill kernel's own text, as written and as the library hands it to MLX (never compiled: nothing here
    # is evaluated, and MLX builds the text on every call all the same).
    source, header = WS.SOURCE_TMA, WGMMA_HEADER + TMA_HEADER + launch_bounds(cfg.threads(), cfg.blocks)
    written = mx.fast.cuda_kernel(name="host_time_written", input_names=["a"], output_names=["o"], source=source,
                                  header=header)
    compacted = cuda_kernel(name="host_time_compacted", input_names=["a"], output_names=["o"], source=source,
                            header=header)
    kb = {"written": (len(source) + len(header)) / 1e3, "compacted": (len(compact(source)) + len(compact(header))) / 1e3}

    def kernel_call(kern: Any) -> Callable[[], Any]:
        return lambda: kern(inputs=[a], template=[("T", mx.float16)], grid=(32, 1, 1), threadgroup=(32, 1, 1),
                            output_shapes=[(4,)], output_dtypes=[mx.float16])

    rows = [{"what": what, "us": round(build_us(fn), 2)} for what, fn in (
        ("attention (the dispatch)", lambda: attention(q, k, v)),
        ("prefill_plan", lambda: prefill_plan(q, k, v)),
        (f"attention_wgmma_ws ({WS.config_name(cfg)})", lambda: WS.attention_wgmma_ws(q, k, v, False, cfg)),
        ("mx.fast.cuda_kernel call, 12-byte source", kernel_call(small)),
        ("mx.fast.cuda_kernel call, 60 KB of comment lines", kernel_call(padded)),
        (f"mx.fast.cuda_kernel call, the prefill kernel's text as written ({kb['written']:.1f} KB)", kernel_call(written)),
        (f"mx.fast.cuda_kernel call, that text compacted ({kb['compacted']:.1f} KB)", kernel_call(compacted)),
    )]
    for r in rows:
        print(f"{r['what']}: {r['us']} us", flush=True)
    data = make_result("prefill-host-time", get_backend(None), rows, [{"B": 1, "Hq": 8, "Hkv": 2, "L": 2048, "D": 128}],
                       ["float16"], {}, "host microseconds a call building the graph, nothing evaluated")
    print("wrote", write_result(data, out_dir))


if __name__ == "__main__":
    if len(sys.argv) != 2:
        raise SystemExit("usage: python benchmarks/prefill_host_time.py OUT_DIR")
    main(sys.argv[1])
