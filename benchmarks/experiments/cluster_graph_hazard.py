"""Does a launch of a non-cluster kernel go missing after a cluster kernel under MLX's CUDA graphs? One process runs a
thread-block-cluster kernel (decode_cluster with 2 splits) in batches of calls, then kernels without cluster dims
(a trivial custom kernel, and decode_cluster with one split) in batches of the same shape, and checks every output;
run it with MLX_USE_CUDA_GRAPHS=0 as well to compare.

    python benchmarks/experiments/cluster_graph_hazard.py
"""

from __future__ import annotations

import math
import os

import mlx.core as mx

from ksearch.kernels.decode import cuda_cluster as DC


def ref(q: mx.array, k: mx.array, v: mx.array) -> mx.array:
    g = q.shape[1] // k.shape[1]
    k = mx.repeat(k.astype(mx.float32), g, axis=1)
    v = mx.repeat(v.astype(mx.float32), g, axis=1)
    s = (q.astype(mx.float32) @ k.transpose(0, 1, 3, 2)) / math.sqrt(q.shape[-1])
    return mx.softmax(s, axis=-1) @ v


def decode(cs: int, q: mx.array, kc: mx.array, vc: mx.array, n: int) -> mx.array:
    cfg = DC.ClusterConfig()
    b, hq, _, d = q.shape
    hkv = kc.shape[1]
    kern = DC._kernel(cfg, cs, cfg.smem_bytes(d, hq // hkv))
    return kern(inputs=[q, kc[:, :, :n], vc[:, :, :n]], template=DC.template(q.dtype, d, hq // hkv, cfg, cs),
                grid=(b * hkv * cfg.threads(), cs, 1), threadgroup=(cfg.threads(), 1, 1), output_shapes=[q.shape],
                output_dtypes=[q.dtype])[0]


TWICE = mx.fast.cuda_kernel(name="ks_hazard_twice", input_names=["x"], output_names=["y"],
                            source="int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < x_shape[0]) y[i] = 2.f * x[i];")


def main() -> None:
    print("MLX_USE_CUDA_GRAPHS =", os.environ.get("MLX_USE_CUDA_GRAPHS", "(default)"), flush=True)
    mx.random.seed(0)
    q = mx.random.normal((2, 32, 1, 128)).astype(mx.float16)
    kc = mx.random.normal((2, 8, 4352, 128)).astype(mx.float16)
    vc = mx.random.normal((2, 8, 4352, 128)).astype(mx.float16)
    x = mx.random.normal((4096,))
    want = ref(q, kc[:, :, :4096], vc[:, :, :4096])
    mx.eval(q, kc, vc, x, want)

    def err(outs: list[mx.array]) -> float:
        return max(float(mx.max(mx.abs(o.astype(mx.float32) - want)).item()) for o in outs)

    steps = [("cluster of 2", lambda: decode(2, q, kc, vc, 4096)), ("twice (no cluster)", None),
             ("cluster of 1 (no cluster dims)", lambda: decode(1, q, kc, vc, 4096)),
             ("cluster of 2 again", lambda: decode(2, q, kc, vc, 4096)), ("twice (no cluster)", None)]
    for name, fn in steps:
        for batch in (1, 10):
            if fn is None:
                outs = [TWICE(inputs=[x], grid=(4096, 1, 1), threadgroup=(256, 1, 1), output_shapes=[x.shape],
                              output_dtypes=[x.dtype])[0] for _ in range(batch)]
                mx.eval(outs)
                e = max(float(mx.max(mx.abs(o - 2 * x)).item()) for o in outs)
            else:
                outs = [fn() for _ in range(batch)]
                mx.eval(outs)
                e = err(outs)
            print(f"{name:32s} batch {batch:2d}: max error {e:.2e} {'ok' if e < 4e-3 else 'WRONG'}", flush=True)


if __name__ == "__main__":
    main()
