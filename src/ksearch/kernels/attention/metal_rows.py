"""Prefill attention in the Metal dialect (mx.fast.metal_kernel), one query row a thread. OPT-IN: not yet measured on
Apple hardware.

K/V tiles are staged in threadgroup memory (one tile serves NT query rows) with causal tile skipping, a causal
prefill's blocks of each head handed out longest first (as the CUDA kernels do); used for dtypes
other than float16; float16 prefill goes to the `simdgroup_matrix` kernel of metal_simdgroup.py.
Enable with KSEARCH_METAL_KERNELS=1 (or `use_metal=True`) and please report timings from `ksearch bench attention`.
"""

from __future__ import annotations

import math
from functools import cache
from typing import Any

from ksearch.kernels.kernel_text import metal_kernel

# Template: T, D, NT (query rows = threads per threadgroup), BN (keys per tile), CAUSAL.
PREFILL_SOURCE = r"""
    const int Hq = q_shape[1], L = q_shape[2], Hkv = k_shape[1], S = k_shape[2];
    const int nblk = (L + NT - 1) / NT;
    // causal: each head's longest rows first (the last rows see the most keys), as the CUDA kernels hand them out
    const int tb = threadgroup_position_in_grid.x % nblk;
    const int bh = threadgroup_position_in_grid.x / nblk, r0 = (CAUSAL ? nblk - 1 - tb : tb) * NT;
    const int tid = thread_position_in_threadgroup.x, i = r0 + tid;
    const int b = bh / Hq, h = bh % Hq, hk = h / (Hq / Hkv);
    const bool active = i < L;
    const float sl2 = 1.4426950408889634f * rsqrt(float(D));
    float qv[D], acc[D];
    for (int d = 0; d < D; ++d) {
      qv[d] = active ? float(q[(size_t(bh) * L + i) * D + d]) * sl2 : 0.0f;
      acc[d] = 0.0f;
    }
    float m = -1e30f, l = 0.0f;
    const int last = CAUSAL ? min(S, i + S - L + 1) : S;
    const int block_last = CAUSAL ? min(S, min(L, r0 + NT) - 1 + S - L + 1) : S;  // causal tile skipping
    const device T* kg = k + size_t(b * Hkv + hk) * S * D;
    const device T* vg = v + size_t(b * Hkv + hk) * S * D;
    threadgroup T Ks[BN * D], Vs[BN * D];
    for (int n0 = 0; n0 < block_last; n0 += BN) {
      threadgroup_barrier(mem_flags::mem_threadgroup);
      for (int e = tid; e < BN * D; e += NT) {
        int j = n0 + e / D;
        Ks[e] = j < S ? kg[size_t(n0) * D + e] : T(0);
        Vs[e] = j < S ? vg[size_t(n0) * D + e] : T(0);
      }
      threadgroup_barrier(mem_flags::mem_threadgroup);
      const int nmax = min(BN, (active ? last : 0) - n0);
      for (int jj = 0; jj < nmax; ++jj) {
        float s = 0.0f;
        for (int d = 0; d < D; ++d) s += qv[d] * float(Ks[jj * D + d]);
        float mn = max(m, s), corr = fast::exp2(m - mn), p = fast::exp2(s - mn);
        l = l * corr + p;
        for (int d = 0; d < D; ++d) acc[d] = acc[d] * corr + p * float(Vs[jj * D + d]);
        m = mn;
      }
    }
    if (active) {
      for (int d = 0; d < D; ++d) o[(size_t(bh) * L + i) * D + d] = T(acc[d] / l);
    }
"""

PREFILL_NT, PREFILL_BN = 64, 16


def supports_prefill(q: Any, k: Any, v: Any, causal: bool) -> bool:
    d = q.shape[-1]
    return d in (64, 128) and q.shape[1] % k.shape[1] == 0 and (not causal or q.shape[2] <= k.shape[2])


@cache
def _prefill_kernel(dtype: Any, d: int, causal: bool) -> Any:
    """The kernel of one (dtype, D, mask), its template arguments as constants in its header
    (kernel_text.metal_constant_lines), made once."""
    return metal_kernel(name="ks_attention_rows", input_names=["q", "k", "v"], output_names=["o"],
                        source=PREFILL_SOURCE, constants=(("T", dtype), ("D", d), ("NT", PREFILL_NT),
                                                          ("BN", PREFILL_BN), ("CAUSAL", bool(causal))))


def attention_metal(q: Any, k: Any, v: Any, causal: bool = False) -> Any:
    b, hq, length, d = q.shape
    nblk = math.ceil(length / PREFILL_NT)
    return _prefill_kernel(q.dtype, d, bool(causal))(
        inputs=[q, k, v], grid=(b * hq * nblk * PREFILL_NT, 1, 1), threadgroup=(PREFILL_NT, 1, 1),
        output_shapes=[q.shape], output_dtypes=[q.dtype])[0]
