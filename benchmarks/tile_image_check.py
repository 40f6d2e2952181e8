"""Tile images on the GPU (ksearch/kernels/attention/wgmma_ws_images.py): the custom kernel `tile_images` must equal the
MLX-ops reference `tile_image` bit for bit, and what each costs (the bulk-copy prefill pays it on every call).

    python benchmarks/tile_image_check.py [OUT_JSON]
"""

from __future__ import annotations

import json
import sys

import mlx.core as mx

from ksearch.bench.timing import time_rounds
from ksearch.kernels.attention.wgmma_ws_images import tile_image, tile_images


def timed(fn, n: int = 20) -> float:  # type: ignore[no-untyped-def]
    """Seconds a call: 3 warm-up calls, then n calls, each evaluated before the next."""
    return time_rounds({"fn": fn}, rounds=1, n=n, warmup=3, eval_each=True)["fn"][0]


def main() -> int:
    rows, bad = [], 0
    for b, h, s in ((1, 8, 2048), (1, 32, 2048), (1, 8, 8192), (4, 32, 4096), (4, 32, 8192), (2, 3, 136)):
        for d in (64, 128):
            for dt in (mx.float16, mx.bfloat16):
                k = mx.random.normal((b, h, s, d)).astype(dt)
                v = mx.random.normal((b, h, s, d)).astype(dt)
                mx.eval(k, v)
                ki, vi = tile_images(k, v)
                same = bool(mx.array_equal(ki, tile_image(k)).item()) and bool(mx.array_equal(vi, tile_image(v)).item())
                bad += not same
                nbytes = 2 * k.nbytes  # K and V
                t_kernel = timed(lambda k=k, v=v: tile_images(k, v))
                t_ops = timed(lambda k=k, v=v: (tile_image(k), tile_image(v)))
                row = {"B": b, "H": h, "S": s, "D": d, "dtype": str(dt).split(".")[-1], "equal": same,
                       "kernel_us": round(t_kernel * 1e6, 1), "mlx_ops_us": round(t_ops * 1e6, 1),
                       "kernel_TBps": round(2 * nbytes / t_kernel / 1e12, 2)}
                rows.append(row)
                print(row, flush=True)
    res = {"device": mx.device_info().get("device_name", "?"), "mlx": mx.__version__, "rows": rows, "mismatches": bad}
    if len(sys.argv) > 1:
        with open(sys.argv[1], "w") as fh:
            json.dump(res, fh, indent=1)
    print("mismatches:", bad)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
