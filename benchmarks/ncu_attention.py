"""Three calls of the library prefill (KSEARCH_WGMMA_CONFIG names another configuration) for Nsight Compute, which
profiles the second: the first includes the compile (ncu -s 1 -c 1; benchmarks/ncu_prefill.py runs it so).

    python benchmarks/ncu_attention.py [L] [D] [full|causal] [--batch B]

Hq 32, Hkv 8, fp16, S = L (default L 8192, D 128, no mask, B 1).
"""

from __future__ import annotations

import argparse

import mlx.core as mx

from ksearch.kernels.attention import attention

ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
ap.add_argument("length", nargs="?", type=int, default=8192)
ap.add_argument("d", nargs="?", type=int, default=128)
ap.add_argument("mask", nargs="?", choices=("full", "causal"), default="full")
ap.add_argument("--batch", type=int, default=1)
args = ap.parse_args()
causal = args.mask == "causal"
q = mx.random.normal((args.batch, 32, args.length, args.d)).astype(mx.float16)
k = mx.random.normal((args.batch, 8, args.length, args.d)).astype(mx.float16)
v = mx.random.normal((args.batch, 8, args.length, args.d)).astype(mx.float16)
for _ in range(3):
    mx.eval(attention(q, k, v, causal))
mx.synchronize()
print("done", flush=True)
