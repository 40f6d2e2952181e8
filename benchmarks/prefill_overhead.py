"""Where a small prefill call's time goes with bulk copies from tile images (attention/wgmma_ws.py; the Hopper
default's configuration with `_bulk` instead of tensor copies: the default before them, the fallback where no tensor
map can be made), side by side in one process, interleaved rounds: the full call; the same with a fresh scale array
every call (as before attention/cuda_prefill.softmax_scale cached it); the attention kernel alone on tile images
made beforehand; the tile-image kernel alone; MLX's native attention.

    python benchmarks/prefill_overhead.py [OUT_JSON]
"""

from __future__ import annotations

import json
import math
import statistics
import sys

import mlx.core as mx

from ksearch.bench.timing import time_rounds
from ksearch.kernels.attention import attention, native_attention, wgmma_config
from ksearch.kernels.attention import cuda_prefill as AC
from ksearch.kernels.attention import wgmma_ws as WS


def fresh_scale(d: int):  # type: ignore[no-untyped-def]
    return mx.array([1.0 / math.sqrt(d)], dtype=mx.float32)


def measure(b: int, hkv: int, length: int, d: int, causal: bool) -> dict:
    cached_scale, images = AC.softmax_scale, WS.tile_images
    q = mx.random.normal((b, 32, length, d)).astype(mx.float16)
    k = mx.random.normal((b, hkv, length, d)).astype(mx.float16)
    v = mx.random.normal((b, hkv, length, d)).astype(mx.float16)
    ki, vi = WS.tile_images(k, v)
    mx.eval(q, k, v, ki, vi)
    bulk = WS.with_bulk_copies(wgmma_config(q, k, causal))

    def full():  # type: ignore[no-untyped-def]
        return attention(q, k, v, causal, config=bulk)

    def fresh():  # type: ignore[no-untyped-def]
        AC.softmax_scale = fresh_scale
        try:
            return attention(q, k, v, causal, config=bulk)
        finally:
            AC.softmax_scale = cached_scale

    def kernel_only():  # type: ignore[no-untyped-def]
        WS.tile_images = lambda k_, v_: (k_, v_)
        try:
            return attention(q, ki, vi, causal, config=bulk)
        finally:
            WS.tile_images = images

    fns = {"full": full, "fresh_scale": fresh, "kernel_only": kernel_only,
           "images_only": lambda: WS.tile_images(k, v)[0], "native": lambda: native_attention(q, k, v, causal)}
    assert float(mx.max(mx.abs(kernel_only() - full())).item()) == 0.0
    times = time_rounds(fns, rounds=9, n=20, warmup=1)  # bench attention's interleaved rounds
    return {"B": b, "Hq": 32, "Hkv": hkv, "L": length, "D": d, "causal": causal,
           **{f"{n}_us": round(statistics.median(t) * 1e6, 1) for n, t in times.items()}}


def main() -> None:
    rows = []
    for shape in ((1, 8, 2048, 128, False), (1, 8, 2048, 128, True), (1, 8, 2048, 64, False), (1, 32, 2048, 64, True),
                  (1, 8, 8192, 128, False)):
        rows.append(measure(*shape))
        print(rows[-1], flush=True)
    res = {"device": mx.device_info().get("device_name", "?"), "mlx": mx.__version__, "calls_per_round": 20,
           "rounds": 9, "rows": rows}
    if len(sys.argv) > 1:
        with open(sys.argv[1], "w") as fh:
            json.dump(res, fh, indent=1)


if __name__ == "__main__":
    main()
