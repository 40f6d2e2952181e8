"""FlashAttention-2 style prefill on Apple's `simdgroup_matrix` (8x8 matrix units) for mx.fast.metal_kernel.

OPT-IN until measured on Apple hardware: it passes clang with the project's MSL shim (tests/test_attention_metal_mma.py)
and runs correctly on the Metal emulation against MLX's attention (tests/test_metalemu_acceptance_kernels.py). Enable
with KSEARCH_METAL_KERNELS=1; `ksearch.kernels.attention` then takes this kernel for float16 and float32 inputs with D
64 or 128 (the row kernel of metal_rows.py otherwise).

Layout: a threadgroup of 4 simdgroups owns BQ = 32 query rows of one (batch, head); simdgroup s owns rows 8s..8s+7.
Per key block of BK rows (`block_keys`: the longest that fits Q, K, V, S and P in the 32 KB of threadgroup memory,
16 at D=128 and 32 at D=64 in float16, 8 and 16 in float32): K and V are staged in threadgroup memory (four elements
a lane, as Q); S = Q K^T is built from 8x8 products (K loaded transposed by `simdgroup_load`), stored to threadgroup
memory, where 4 lanes per row run the online softmax in exp2 (scale and log2(e) folded into Q) and write P in the
inputs' dtype; the accumulator rows are rescaled by a diagonal 8x8 matrix (matrix units have no per-row access;
skipped by a simdgroup none of whose rows' maxima grew past 2^8, CRESCALE), and O += P V. Tiles are addressed by
pointer (origin 0), so the only layout convention relied on is `simdgroup_load`'s transpose flag for K^T. Causal:
keys aligned lower right (key j visible to query i when j <= i + S - L), blocks past the last visible key skipped,
each head's query blocks handed out longest first (in reverse order, as the CUDA kernels do; not measured on Apple
hardware). GQA: head h reads kv head h / (Hq / Hkv).

Float32 runs on the matrix units at full precision (`simdgroup_float8x8` multiplies float32 operands): the Hopper
kernels split each float32 operand into three TF32 products to keep fp32's accuracy (tf32x3.py); Apple's matrix units
need no split. Bfloat16 stays with the row kernel: bfloat matrices (`simdgroup_matrix<bfloat, 8, 8>`) are Metal 3.1's,
and whether Apple's compiler and GPUs take them as MLX hands over `bfloat16_t` nothing here can check (the Metal
emulation runs them).
"""

from __future__ import annotations

import math
from functools import cache
from typing import Any

from ksearch.kernels.kernel_text import metal_kernel

BQ = 32  # query rows per threadgroup (4 simdgroups x 8)
NT = 128
TG_BYTES = 32 * 1024  # threadgroup memory a Metal threadgroup may take (Apple GPUs)
# The conditional rescale on by default: checked on the Metal emulation, not measured on Apple hardware. On the H200
# it took 6% off a tile where O's rescale sat on the path between products (docs/kernels-attention.md); here the
# rescale is a third of the matrix work after S at D=128 (16 diagonal products against P V's 32).
CRESCALE = True

# What both simdgroup prefills run alike (metal_fragments.py builds its kernel from these too): the block's place
# (GQA: head h reads kv head h / (Hq / Hkv)), Q scaled by log2(e) / sqrt(D) into Qs, and key block k0 of K and V into
# Ks and Vs (zero rows past S).
BLOCK_PLACE = r"""
    const uint sg = simdgroup_index_in_threadgroup, lane = thread_index_in_simdgroup;
    const uint tid = thread_index_in_threadgroup;
    // causal: each head's longest query blocks first (the last see the most keys), as the CUDA kernels hand them out
    const int tx = int(threadgroup_position_in_grid.x), bh = int(threadgroup_position_in_grid.y);
    const int qblk = CAUSAL ? int(threadgroups_per_grid.x) - 1 - tx : tx;
    const int Hq = q_shape[1], L = q_shape[2], Hkv = k_shape[1], S = k_shape[2];
    const int b = bh / Hq, h = bh % Hq, hk = h / (Hq / Hkv);
    const int q0 = qblk * BQ;
    const int off = S - L;
    const device T* qp = q + size_t(bh) * size_t(L) * D;
    const device T* kp = k + (size_t(b) * Hkv + hk) * size_t(S) * D;
    const device T* vp = v + (size_t(b) * Hkv + hk) * size_t(S) * D;
"""
LOAD_Q = r"""
    // Q, K and V move 8 bytes a lane (four halves, MSL's widest vector), not one element
    constexpr int C4 = D / 4;
    const float qscale = 1.4426950408889634f * rsqrt(float(D));
    for (uint i = tid; i < uint(BQ * C4); i += NSG * 32) {
        const int r = int(i) / C4, c = (int(i) % C4) * 4;
        vec<T, 4> x = T(0.0f);
        if (q0 + r < L) x = *((const device vec<T, 4>*)(qp + size_t(q0 + r) * D + c));
        vec<T, 4> y;
        y.x = T(float(x.x) * qscale); y.y = T(float(x.y) * qscale);
        y.z = T(float(x.z) * qscale); y.w = T(float(x.w) * qscale);
        *((threadgroup vec<T, 4>*)(Qs + r * D + c)) = y;
    }
"""
LOAD_KV = r"""
        for (uint i = tid; i < uint(BK * C4); i += NSG * 32) {
            const int r = int(i) / C4, c = (int(i) % C4) * 4;
            const size_t g = size_t(k0 + r) * D + c;
            vec<T, 4> kx = T(0.0f), vx = T(0.0f);
            if (k0 + r < S) {
                kx = *((const device vec<T, 4>*)(kp + g));
                vx = *((const device vec<T, 4>*)(vp + g));
            }
            *((threadgroup vec<T, 4>*)(Ks + r * D + c)) = kx;
            *((threadgroup vec<T, 4>*)(Vs + r * D + c)) = vx;
        }
"""

# Template: T (half or float), D (64 or 128), BK (key rows per block), CAUSAL, CRESCALE (rows keep their maximum
# while it grows by at most 2^8, and a simdgroup whose rows all kept skips its diagonal product: at D=128 16 of the
# 48 8x8 products that follow S a block).
SOURCE = r"""
    constexpr int NSG = 4;
    constexpr int BQ = 32;
    constexpr int DT = D / 8;
    constexpr int KT = BK / 8;
    constexpr int CPL = BK / 4;  // softmax: 4 lanes per row, CPL columns each
""" + BLOCK_PLACE + r"""
    threadgroup T Qs[BQ * D];
    threadgroup T Ks[BK * D];
    threadgroup T Vs[BK * D];
    threadgroup float Ss[BQ * BK];
    threadgroup T Ps[BQ * BK];
    threadgroup float Ds[NSG * 64];
    threadgroup float Os[NSG * 64];
    threadgroup float rowm[BQ];
    threadgroup float rowl[BQ];

""" + LOAD_Q + r"""    if (tid < uint(BQ)) { rowm[tid] = -INFINITY; rowl[tid] = 0.0f; }
    simdgroup_float8x8 acc[DT];
    for (int t = 0; t < DT; ++t) acc[t] = make_filled_simdgroup_matrix<float, 8, 8>(0.0f);
    const int kend = CAUSAL ? min(S, q0 + BQ + off) : S;
    bool resc = true;  // whether this key block's diagonal product runs (CRESCALE)
    threadgroup_barrier(mem_flags::mem_threadgroup);

    for (int k0 = 0; k0 < kend; k0 += BK) {
""" + LOAD_KV + r"""        threadgroup_barrier(mem_flags::mem_threadgroup);

        // S (8 x BK) of this simdgroup's rows: Q (8 x D) times K^T (D x BK), 8x8 tiles.
        for (int j = 0; j < KT; ++j) {
            simdgroup_float8x8 s = make_filled_simdgroup_matrix<float, 8, 8>(0.0f);
            for (int t = 0; t < DT; ++t) {
                simdgroup_matrix<T, 8, 8> qa;
                simdgroup_matrix<T, 8, 8> kb;
                simdgroup_load(qa, Qs + sg * 8 * D + t * 8, D);
                simdgroup_load(kb, Ks + j * 8 * D + t * 8, D, ulong2(0, 0), true);
                simdgroup_multiply_accumulate(s, qa, kb, s);
            }
            simdgroup_store(s, Ss + sg * 8 * BK + j * 8, BK);
        }
        simdgroup_barrier(mem_flags::mem_threadgroup);

        // Online softmax over the block, 4 lanes per row; P as T; the rows' rescale factors on a diagonal.
        {
            const int r = int(sg) * 8 + int(lane) / 4, part = int(lane) % 4;
            const int qi = q0 + r;
            const float mold = rowm[r];
            float sv[CPL];
            float mblk = -INFINITY;
            for (int c = 0; c < CPL; ++c) {
                const int col = part * CPL + c, kj = k0 + col;
                const bool vis = kj < S && (!CAUSAL || kj <= qi + off);
                sv[c] = vis ? Ss[r * BK + col] : -INFINITY;
                mblk = max(mblk, sv[c]);
            }
            mblk = max(mblk, simd_shuffle_xor(mblk, ushort(1)));
            mblk = max(mblk, simd_shuffle_xor(mblk, ushort(2)));
            // CRESCALE (FlashAttention-4's rule, as the Hopper kernels' `_cr`): a row keeps its old maximum while the
            // block grows it by at most 2^8, so P stays <= 256 (half holds it) and the row's correction is exactly 1
            const bool keep = CRESCALE && mblk <= mold + 8.0f;
            const float mnew = keep ? mold : max(mold, mblk);
            const float base = (mnew == -INFINITY) ? 0.0f : mnew;  // no visible key yet: avoid -inf - -inf
            float ls = 0.0f;
            for (int c = 0; c < CPL; ++c) {
                const float p = fast::exp2(sv[c] - base);
                ls += p;
                Ps[r * BK + part * CPL + c] = T(p);
            }
            ls += simd_shuffle_xor(ls, ushort(1));
            ls += simd_shuffle_xor(ls, ushort(2));
            const float corr = keep ? 1.0f : fast::exp2(mold - base);
            resc = !CRESCALE || simd_any(corr != 1.0f);  // the simdgroup's rows all kept: no diagonal product
            for (uint e = lane; e < 64; e += 32) Ds[sg * 64 + e] = 0.0f;
            simdgroup_barrier(mem_flags::mem_threadgroup);
            if (part == 0) {
                rowm[r] = mnew;
                rowl[r] = rowl[r] * corr + ls;
                Ds[sg * 64 + (lane / 4) * 9] = corr;
            }
        }
        simdgroup_barrier(mem_flags::mem_threadgroup);

        // acc = diag(corr) acc + P V
        {
            if (resc) {  // uniform across the simdgroup (simd_any)
                simdgroup_float8x8 dg;
                simdgroup_load(dg, Ds + sg * 64, 8);
                for (int t = 0; t < DT; ++t) {
                    simdgroup_float8x8 scaled;
                    simdgroup_multiply(scaled, dg, acc[t]);
                    acc[t] = scaled;
                }
            }
            for (int j = 0; j < KT; ++j) {
                simdgroup_matrix<T, 8, 8> pa;
                simdgroup_load(pa, Ps + sg * 8 * BK + j * 8, BK);
                for (int t = 0; t < DT; ++t) {
                    simdgroup_matrix<T, 8, 8> vb;
                    simdgroup_load(vb, Vs + j * 8 * D + t * 8, D);
                    simdgroup_multiply_accumulate(acc[t], pa, vb, acc[t]);
                }
            }
        }
        threadgroup_barrier(mem_flags::mem_threadgroup);  // Ks / Vs / Ss are refilled by the next block
    }

    // O = diag(1 / l) acc, written through an 8x8 staging tile per simdgroup.
    for (uint e = lane; e < 64; e += 32) Ds[sg * 64 + e] = 0.0f;
    simdgroup_barrier(mem_flags::mem_threadgroup);
    if (lane < 8) {
        const float l = rowl[sg * 8 + lane];
        Ds[sg * 64 + lane * 9] = l > 0.0f ? 1.0f / l : 0.0f;
    }
    simdgroup_barrier(mem_flags::mem_threadgroup);
    simdgroup_float8x8 dg;
    simdgroup_load(dg, Ds + sg * 64, 8);
    for (int t = 0; t < DT; ++t) {
        simdgroup_float8x8 ot;
        simdgroup_multiply(ot, dg, acc[t]);
        simdgroup_store(ot, Os + sg * 64, 8);
        simdgroup_barrier(mem_flags::mem_threadgroup);
        // Four columns a lane, one 8-byte store (the CUDA kernels' wider stores of O): 16 lanes write the 8 x 8 tile.
        if (lane < 16) {
            const int qi = q0 + int(sg) * 8 + int(lane) / 2, c = int(lane % 2) * 4;
            threadgroup const float* src = Os + sg * 64 + (lane / 2) * 8 + c;
            vec<T, 4> w;
            w.x = T(src[0]); w.y = T(src[1]); w.z = T(src[2]); w.w = T(src[3]);
            if (qi < L) *((device vec<T, 4>*)(o + (size_t(bh) * L + qi) * D + t * 8 + c)) = w;
        }
        simdgroup_barrier(mem_flags::mem_threadgroup);
    }
"""


def tg_bytes(d: int, bk: int, itemsize: int = 2) -> int:
    """Threadgroup memory of SOURCE's arrays: Q, K, V and P in the inputs' dtype (`itemsize` bytes), S and the two
    8x8 scratch tiles a simdgroup as float, two float rows of softmax state."""
    return itemsize * (BQ * d + 2 * bk * d + BQ * bk) + 4 * (BQ * bk + 2 * 4 * 64 + 2 * BQ)


def block_keys(d: int, itemsize: int = 2) -> int:
    """Key rows per block: the longest of 64, 32, 16 and 8 whose arrays fit TG_BYTES (float16: 16 at D=128, 32 at
    D=64; float32: 8 and 16)."""
    return next(bk for bk in (64, 32, 16, 8) if tg_bytes(d, bk, itemsize) <= TG_BYTES)


def supports(q: Any, k: Any, v: Any, causal: bool) -> bool:
    import mlx.core as mx

    d = q.shape[-1]
    return (q.dtype in (mx.float16, mx.float32) and k.dtype == q.dtype and v.dtype == q.dtype and d in (64, 128)
            and q.shape[1] % k.shape[1] == 0 and (not causal or q.shape[2] <= k.shape[2]))


@cache
def _kernel(dtype: Any, d: int, causal: bool, crescale: bool) -> Any:
    """The kernel of one (dtype, D, mask, rescale), its template arguments as constants in its header
    (kernel_text.metal_constant_lines), made once."""
    return metal_kernel(name="ks_attention_simdgroup_mma", input_names=["q", "k", "v"], output_names=["o"],
                        source=SOURCE, constants=(("T", dtype), ("D", d), ("BK", block_keys(d, dtype.size)),
                                                  ("CAUSAL", bool(causal)), ("CRESCALE", bool(crescale))))


def attention_metal_mma(q: Any, k: Any, v: Any, causal: bool = False, crescale: bool = CRESCALE) -> Any:
    b, hq, length, d = q.shape
    nblk = math.ceil(length / BQ)
    return _kernel(q.dtype, d, bool(causal), bool(crescale))(
        inputs=[q, k, v], grid=(nblk * NT, b * hq, 1), threadgroup=(NT, 1, 1), output_shapes=[q.shape],
        output_dtypes=[q.dtype])[0]
