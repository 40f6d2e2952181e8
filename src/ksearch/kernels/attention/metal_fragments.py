"""FlashAttention-2 prefill on Apple's `simdgroup_matrix` with the softmax on each lane's own fragment elements.

The Hopper kernels take P for O += P V straight from the accumulator registers of S = Q K^T (no trip through shared
memory); this is that idea on Metal. The simdgroup kernel (metal_simdgroup.py) stores S to threadgroup memory, runs
the softmax there with 4 lanes a row, writes P back in the inputs' dtype and loads it again as a matrix, and rescales
O by a diagonal 8x8 product, because it relies on no fragment layout. Here each lane works on the two elements of
every 8x8 fragment that `thread_elements()` gives it, in the layout MLX's own steel kernels rely on (lane l holds row
(l / 4 & 4) + (l / 2) % 4, columns (l / 4 & 2) * 2 + (l % 2) * 2 and the next; the Metal emulation implements the
same): the row's maximum and sum take two `simd_shuffle_xor` steps (lanes 1 and 8 apart share a row), P becomes a
fragment in registers, O's rescale is two multiplies a fragment, and O is stored from registers. Q is held as
fragments for the whole block. With S and P out of threadgroup memory a block of K / V can be twice as long within the
32 KB (32 keys at D=128, 64 at D=64 in float16; 16 and 32 in float32): half the barriers a key.

Its block set-up and loads are the simdgroup kernel's (metal_simdgroup.BLOCK_PLACE, LOAD_Q, LOAD_KV; the static
reader the linter and the emulation's tests share, knowledge.extract.find_kernels, follows the import).

OPT-IN and NOT MEASURED on Apple hardware: `attention_metal_fragments` and the template family's `softmax` knob
(policy/templates/attention_metal_flash.py) run it; the library's dispatch keeps the simdgroup kernel, which depends
on no fragment layout. Checked by clang with the project's MSL shim (tests/test_attention_metal_mma.py) and on the
Metal emulation against MLX's attention (tests/test_metalemu_acceptance_kernels.py): GQA, the causal mask with S > L,
partial blocks, rows whose maximum grows block after block.
"""

from __future__ import annotations

import math
from functools import cache
from typing import Any

from ksearch.kernels.attention.metal_simdgroup import BLOCK_PLACE, BQ, CRESCALE, LOAD_KV, LOAD_Q, NT, TG_BYTES
from ksearch.kernels.kernel_text import metal_kernel

# Template: T (half or float), D (64 or 128), BK (key rows a block), CAUSAL, CRESCALE (rows keep their maximum while a
# block grows it by at most 2^8, and O's rescale is skipped where a simdgroup's rows all kept).
SOURCE = r"""
    constexpr int NSG = 4;
    constexpr int BQ = 32;
    constexpr int DT = D / 8;
    constexpr int KT = BK / 8;
""" + BLOCK_PLACE + r"""    // this lane's place in every 8x8 fragment: row fm, columns fn and fn + 1 (lanes 1 and 8 apart share the row)
    const int quad = int(lane) / 4;
    const int fm = (quad & 4) + (int(lane) / 2) % 4, fn = (quad & 2) * 2 + (int(lane) % 2) * 2;
    const int qi = q0 + int(sg) * 8 + fm;

    threadgroup T Qs[BQ * D];
    threadgroup T Ks[BK * D];
    threadgroup T Vs[BK * D];

""" + LOAD_Q + r"""    threadgroup_barrier(mem_flags::mem_threadgroup);
    simdgroup_matrix<T, 8, 8> qf[DT];
    for (int t = 0; t < DT; ++t) simdgroup_load(qf[t], Qs + sg * 8 * D + t * 8, D);
    simdgroup_float8x8 acc[DT];
    for (int t = 0; t < DT; ++t) acc[t] = make_filled_simdgroup_matrix<float, 8, 8>(0.0f);
    float mrow = -INFINITY, lrow = 0.0f;  // the lane's row's running maximum and sum (its four lanes agree)
    const int kend = CAUSAL ? min(S, q0 + BQ + off) : S;

    for (int k0 = 0; k0 < kend; k0 += BK) {
""" + LOAD_KV + r"""        threadgroup_barrier(mem_flags::mem_threadgroup);

        // S (8 x BK) of this simdgroup's rows: Q (8 x D) times K^T (D x BK), K loaded transposed.
        simdgroup_float8x8 s[KT];
        for (int j = 0; j < KT; ++j) {
            s[j] = make_filled_simdgroup_matrix<float, 8, 8>(0.0f);
            for (int t = 0; t < DT; ++t) {
                simdgroup_matrix<T, 8, 8> kb;
                simdgroup_load(kb, Ks + j * 8 * D + t * 8, D, ulong2(0, 0), true);
                simdgroup_multiply_accumulate(s[j], qf[t], kb, s[j]);
            }
        }

        // The online softmax on the lane's own elements; the row's four lanes combine by two shuffles.
        float mblk = -INFINITY;
        for (int j = 0; j < KT; ++j) {
            const int kj = k0 + j * 8 + fn;
            const bool vis0 = kj < S && (!CAUSAL || kj <= qi + off);
            const bool vis1 = kj + 1 < S && (!CAUSAL || kj + 1 <= qi + off);
            s[j].thread_elements()[0] = vis0 ? float(s[j].thread_elements()[0]) : -INFINITY;
            s[j].thread_elements()[1] = vis1 ? float(s[j].thread_elements()[1]) : -INFINITY;
            mblk = max(mblk, max(float(s[j].thread_elements()[0]), float(s[j].thread_elements()[1])));
        }
        mblk = max(mblk, simd_shuffle_xor(mblk, ushort(1)));
        mblk = max(mblk, simd_shuffle_xor(mblk, ushort(8)));
        // CRESCALE: a row keeps its old maximum while the block grows it by at most 2^8, so P stays <= 256
        const bool keep = CRESCALE && mblk <= mrow + 8.0f;
        const float mnew = keep ? mrow : max(mrow, mblk);
        const float base = (mnew == -INFINITY) ? 0.0f : mnew;  // no visible key yet: avoid -inf - -inf
        simdgroup_matrix<T, 8, 8> pf[KT];
        float ls = 0.0f;
        for (int j = 0; j < KT; ++j) {
            const float p0 = fast::exp2(float(s[j].thread_elements()[0]) - base);
            const float p1 = fast::exp2(float(s[j].thread_elements()[1]) - base);
            ls += p0 + p1;
            pf[j].thread_elements()[0] = T(p0);
            pf[j].thread_elements()[1] = T(p1);
        }
        ls += simd_shuffle_xor(ls, ushort(1));
        ls += simd_shuffle_xor(ls, ushort(8));
        const float corr = keep ? 1.0f : fast::exp2(mrow - base);
        lrow = lrow * corr + ls;
        mrow = mnew;
        if (!CRESCALE || simd_any(corr != 1.0f)) {  // uniform across the simdgroup
            for (int t = 0; t < DT; ++t) {
                acc[t].thread_elements()[0] *= corr;
                acc[t].thread_elements()[1] *= corr;
            }
        }

        // O += P V, P from registers.
        for (int j = 0; j < KT; ++j) {
            for (int t = 0; t < DT; ++t) {
                simdgroup_matrix<T, 8, 8> vb;
                simdgroup_load(vb, Vs + j * 8 * D + t * 8, D);
                simdgroup_multiply_accumulate(acc[t], pf[j], vb, acc[t]);
            }
        }
        threadgroup_barrier(mem_flags::mem_threadgroup);  // Ks / Vs are refilled by the next block
    }

    // O = acc / l from registers: the lane's two columns of each fragment as one 4-byte store.
    if (qi < L) {
        const float inv = lrow > 0.0f ? 1.0f / lrow : 0.0f;
        device T* orow = o + (size_t(bh) * L + qi) * D + fn;
        for (int t = 0; t < DT; ++t) {
            vec<T, 2> w;
            w.x = T(float(acc[t].thread_elements()[0]) * inv);
            w.y = T(float(acc[t].thread_elements()[1]) * inv);
            *((device vec<T, 2>*)(orow + t * 8)) = w;
        }
    }
"""


def block_keys(d: int, itemsize: int = 2) -> int:
    """Key rows a block: the longest of 64, 32, 16 and 8 whose Q, K and V fit TG_BYTES (float16: 32 at D=128, 64 at
    D=64, twice the simdgroup kernel's, whose S and P take threadgroup memory too; float32: 16 and 32)."""
    return next(bk for bk in (64, 32, 16, 8) if tg_bytes(d, bk, itemsize) <= TG_BYTES)


def tg_bytes(d: int, bk: int, itemsize: int = 2) -> int:
    """Threadgroup memory of SOURCE's arrays in the inputs' dtype (`itemsize` bytes): Q (BQ x D), K and V (BK x D
    each)."""
    return itemsize * (BQ * d + 2 * bk * d)


@cache
def _kernel(dtype: Any, d: int, causal: bool, crescale: bool, bk: int) -> Any:
    """The kernel of one (dtype, D, mask, rescale, block), its template arguments as constants in its header, made
    once."""
    return metal_kernel(name="ks_attention_fragments", input_names=["q", "k", "v"], output_names=["o"],
                        source=SOURCE, constants=(("T", dtype), ("D", d), ("BK", bk), ("CAUSAL", bool(causal)),
                                                  ("CRESCALE", bool(crescale))))


def attention_metal_fragments(q: Any, k: Any, v: Any, causal: bool = False, crescale: bool = CRESCALE,
                              bk: int | None = None) -> Any:
    """Prefill attention through this kernel (float16 or float32, D 64 or 128, Hq a multiple of Hkv, L <= S with the
    mask: metal_simdgroup.supports). `bk`: key rows a block, a multiple of 8 within 32 KB (default
    `block_keys(D, itemsize)`)."""
    b, hq, length, d = q.shape
    size = q.dtype.size
    keys = block_keys(d, size) if bk is None else bk
    if keys <= 0 or keys % 8 or tg_bytes(d, keys, size) > TG_BYTES:
        raise ValueError(f"bk={keys}: key rows a block must be a positive multiple of 8 whose Q, K and V fit 32 KB of "
                         f"threadgroup memory at D={d} in {q.dtype}, e.g. {block_keys(d, size)}")
    return _kernel(q.dtype, d, bool(causal), bool(crescale), keys)(
        inputs=[q, k, v], grid=(math.ceil(length / BQ) * NT, b * hq, 1), threadgroup=(NT, 1, 1),
        output_shapes=[q.shape], output_dtypes=[q.dtype])[0]
