"""One call of the default prefill kernel for Nsight Compute (the device machine has `ncu`):

    ncu --graph-profiling node -k regex:ks_flash -s 1 -c 1 --section SpeedOfLight --section WarpStateStats \
        python benchmarks/ncu_attention.py [L] [D] [causal]

Three calls: skip the first with ncu -s 1 (it includes the JIT compile) and profile the next (-c 1).
"""

from __future__ import annotations

import sys

import mlx.core as mx

from ksearch.kernels.attention import attention

length = int(sys.argv[1]) if len(sys.argv) > 1 else 8192
d = int(sys.argv[2]) if len(sys.argv) > 2 else 128
causal = len(sys.argv) > 3 and sys.argv[3] == "causal"
q = mx.random.normal((1, 32, length, d)).astype(mx.float16)
k = mx.random.normal((1, 8, length, d)).astype(mx.float16)
v = mx.random.normal((1, 8, length, d)).astype(mx.float16)
for _ in range(3):
    mx.eval(attention(q, k, v, causal))
mx.synchronize()
print("done", flush=True)
