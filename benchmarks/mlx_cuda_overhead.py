"""Where a small MLX-CUDA call spends its time: per-node cost of tiny ops and tiny custom kernels, eager vs
mx.compile, the decode kernel (split + merge vs one fused launch) at a launch-bound shape, and the host's cost of
building one call's graph (`build_*_s`: Python and MLX's graph construction, nothing evaluated) for the library
decode, its kernel call, MLX's attention on the cache slice and their parts.

    python benchmarks/mlx_cuda_overhead.py OUT.json

Every figure is seconds per node or per call, the median of 7 rounds of one `mx.eval` over a chain of `n` calls.
"""

from __future__ import annotations

import json
import statistics
import sys
from collections.abc import Callable
from typing import Any

import mlx.core as mx

from ksearch.bench.timing import time_rounds
from ksearch.kernels.decode.cuda_split_k import DecodeConfig, decode_cuda

TINY = mx.fast.cuda_kernel(name="ks_tiny_add", input_names=["x"], output_names=["y"],
                           source="int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < x_shape[0]) y[i] = x[i] + 1.f;")


def per_call(fn: Callable[[], Any], n: int, rounds: int = 7) -> float:
    """Median seconds a call over `rounds` rounds of n calls queued back to back (after n warm-up calls)."""
    return statistics.median(time_rounds({"fn": fn}, rounds=rounds, n=n, warmup=n)["fn"])


def chain(step: Callable[[mx.array], mx.array], x: mx.array, length: int) -> Callable[[], mx.array]:
    def run() -> mx.array:
        y = x
        for _ in range(length):
            y = step(y)
        return y

    return run


def tiny(y: mx.array) -> mx.array:
    return TINY(inputs=[y], grid=(256, 1, 1), threadgroup=(256, 1, 1), output_shapes=[y.shape],
                output_dtypes=[y.dtype])[0]


def build_seconds(fn: Callable[[], Any], n: int = 2000) -> float:
    """Median seconds to build one call's graph (nothing evaluated, each call's arrays dropped) over 5 rounds of n."""
    return statistics.median(time_rounds({"fn": fn}, rounds=5, n=n, warmup=1, eval_each=True, device=False)["fn"])


def main(out: str) -> None:
    res: dict[str, Any] = {"mlx": mx.__version__}
    x = mx.zeros((256,), dtype=mx.float32)
    mx.eval(x)
    for name, step in (("add", lambda y: y + 1.0), ("custom_kernel", tiny)):
        eager = chain(step, x, 100)
        compiled = mx.compile(eager)
        res[f"{name}_per_node_eager_s"] = per_call(eager, 1) / 100
        res[f"{name}_per_node_compiled_s"] = per_call(compiled, 1) / 100
        print(name, res[f"{name}_per_node_eager_s"], res[f"{name}_per_node_compiled_s"], flush=True)
    mx.random.seed(0)
    q = mx.random.normal((1, 32, 1, 128)).astype(mx.float16)
    kc = mx.random.normal((1, 8, 4352, 128)).astype(mx.float16)
    vc = mx.random.normal((1, 8, 4352, 128)).astype(mx.float16)
    mx.eval(q, kc, vc)
    for label, cfg in (("split_merge", DecodeConfig()), ("fused", DecodeConfig(fused=True))):
        ref = mx.fast.scaled_dot_product_attention(q, kc[:, :, :4096], vc[:, :, :4096], scale=128 ** -0.5)
        err = float(mx.max(mx.abs(decode_cuda(q, kc, vc, 4096, cfg).astype(mx.float32) - ref.astype(mx.float32))))
        res[f"decode_{label}_max_abs_err"] = err
        for n in (10, 100):
            res[f"decode_{label}_n{n}_s"] = per_call(lambda c=cfg: decode_cuda(q, kc, vc, 4096, c), n)
        print(label, {k: v for k, v in res.items() if k.startswith(f"decode_{label}")}, flush=True)
    for n in (10, 100):
        res[f"decode_native_slice_n{n}_s"] = per_call(
            lambda: mx.fast.scaled_dot_product_attention(q, kc[:, :, :4096], vc[:, :, :4096], scale=128 ** -0.5), n)
    from ksearch.kernels.decode import decode, native_decode

    for label, fn in (("decode", lambda: decode(q, kc, vc, 4096)),
                      ("decode_cuda", lambda: decode_cuda(q, kc, vc, 4096)),
                      ("native_slice", lambda: native_decode(q, kc, vc, 4096)),
                      ("one_slice", lambda: kc[:, :, :4096]),
                      ("tiny_custom_kernel", lambda: tiny(x))):
        fn()
        res[f"build_{label}_s"] = build_seconds(fn)
        print(f"build {label}: {res[f'build_{label}_s'] * 1e6:.2f} us", flush=True)
    print(json.dumps(res, indent=1), flush=True)
    with open(out, "w") as fh:
        json.dump(res, fh, indent=1)


if __name__ == "__main__":
    main(sys.argv[1])
