"""Split-K GQA decode in the Metal dialect (mx.fast.metal_kernel). OPT-IN: not yet measured on Apple hardware.

The same split-K flash-decoding as the CUDA version (cuda_split_k.py): one threadgroup per (batch, kv head, split)
holding all G query heads of the kv head, each simdgroup lane owning 4 dimensions of a key row, scores reduced with
`simd_shuffle_xor`, online softmax in exp2, then a log-sum-exp merge kernel.
Enable with KSEARCH_METAL_KERNELS=1 (or `use_metal=True`) and please report timings from `ksearch bench decode`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cache
from typing import Any

from ksearch.kernels.decode.cuda_split_k import MERGE_FEW, parse_fields
from ksearch.kernels.kernel_text import metal_kernel

# Constants (in the header): T, D, G (query heads per kv head), NW (simdgroups per threadgroup), U (key rows each
# lane loads before using them: the CUDA kernel's unroll, loads in flight to hide memory latency).
# meta = [length, chunk, nsplit].
_SPLIT_BODY = r"""
    constexpr int LPK = D / 4;
    constexpr int KPW = 32 / LPK;
    constexpr int STEP = NW * KPW * U;
    const uint warp = simdgroup_index_in_threadgroup, lane = thread_index_in_simdgroup;
    const int sub = lane / LPK, part = lane % LPK;
    const int bh = threadgroup_position_in_grid.x, split = threadgroup_position_in_grid.y;
    const int cap = k_cache_shape[2];
    const int len = meta[0], chunk = meta[1], nsplit = meta[2];
    const int start = split * chunk, end = min(len, start + chunk);
    const float qscale = 1.4426950408889634f * rsqrt(float(D));
    float qf[G][4], m[G], l[G], acc[G][4];
    for (int g = 0; g < G; ++g) {
      for (int i = 0; i < 4; ++i) {
        qf[g][i] = float(q[(size_t(bh) * G + g) * D + part * 4 + i]) * qscale;
        acc[g][i] = 0.0f;
      }
      m[g] = -1e30f; l[g] = 0.0f;
    }
    const device T* kb = k_cache + size_t(bh) * cap * D + part * 4;
    const device T* vb = v_cache + size_t(bh) * cap * D + part * 4;
    // Each simdgroup takes KPW * U consecutive keys a step: U rows a lane, all loaded before any is used.
    for (int j0 = start + int(warp) * KPW * U + sub; j0 - sub < end; j0 += STEP) {
      bool valid[U];
      float kf[U][4], vf[U][4];
      for (int u = 0; u < U; ++u) {
        const int j = j0 + u * KPW;
        valid[u] = j < end;
        vec<T, 4> kx = T(0.0f), vx = T(0.0f);  // the lane's 4 dimensions as one 8-byte load each
        if (valid[u]) {
          kx = *((const device vec<T, 4>*)(kb + size_t(j) * D));
          vx = *((const device vec<T, 4>*)(vb + size_t(j) * D));
        }
        for (int i = 0; i < 4; ++i) {
          kf[u][i] = float(kx[i]);
          vf[u][i] = float(vx[i]);
        }
      }
      for (int u = 0; u < U; ++u) {
        for (int g = 0; g < G; ++g) {
          float s = qf[g][0] * kf[u][0] + qf[g][1] * kf[u][1] + qf[g][2] * kf[u][2] + qf[g][3] * kf[u][3];
          for (int off = LPK / 2; off > 0; off /= 2) s += simd_shuffle_xor(s, ushort(off));
          s = valid[u] ? s : -INFINITY;
          float mn = max(m[g], s);
          float corr = fast::exp2(m[g] - mn), p = fast::exp2(s - mn);
          l[g] = l[g] * corr + p;
          for (int i = 0; i < 4; ++i) acc[g][i] = acc[g][i] * corr + p * vf[u][i];
          m[g] = mn;
        }
      }
    }
    for (int off = LPK; off < 32; off *= 2) {
      for (int g = 0; g < G; ++g) {
        float mo = simd_shuffle_xor(m[g], ushort(off)), lo = simd_shuffle_xor(l[g], ushort(off));
        float mn = max(m[g], mo), a = fast::exp2(m[g] - mn), c = fast::exp2(mo - mn);
        l[g] = l[g] * a + lo * c;
        for (int i = 0; i < 4; ++i) acc[g][i] = acc[g][i] * a + simd_shuffle_xor(acc[g][i], ushort(off)) * c;
        m[g] = mn;
      }
    }
    threadgroup float sm_m[NW * G], sm_l[NW * G], sm_acc[NW * G * D];
    if (sub == 0) {
      for (int g = 0; g < G; ++g) {
        if (part == 0) { sm_m[warp * G + g] = m[g]; sm_l[warp * G + g] = l[g]; }
        for (int i = 0; i < 4; ++i) sm_acc[(warp * G + g) * D + part * 4 + i] = acc[g][i];
      }
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);
    for (int e = thread_index_in_threadgroup; e < G * D; e += NW * 32) {
      int g = e / D, d = e % D;
      float mn = -1e30f;
      for (int w = 0; w < NW; ++w) mn = max(mn, sm_m[w * G + g]);
      float ls = 0.0f, as = 0.0f;
      for (int w = 0; w < NW; ++w) {
        float c = fast::exp2(sm_m[w * G + g] - mn);
        ls += sm_l[w * G + g] * c;
        as += sm_acc[(w * G + g) * D + d] * c;
      }
"""
# The split's un-normalised partial, for the merge kernel.
_PARTS_TAIL = r"""
      size_t row = (size_t(bh) * nsplit + split) * G + g;
      part_acc[row * D + d] = as;
      if (d == 0) { part_ml[row * 2] = mn; part_ml[row * 2 + 1] = ls; }
    }
"""
# One split a (batch, kv head): the normalised output itself, no merge launch (o is (B, Hq, 1, D), row-contiguous:
# heads bh * G .. + G - 1). The CUDA tensor-core decode does the same where its pairs fill the GPU.
_OUTPUT_TAIL = r"""
      (void)nsplit;
      o[(size_t(bh) * G + g) * D + d] = T(as / ls);
    }
"""
DECODE_SPLIT_SOURCE = _SPLIT_BODY + _PARTS_TAIL
DECODE_ONE_SPLIT_SOURCE = _SPLIT_BODY + _OUTPUT_TAIL

# One threadgroup of D threads per (batch, query head), as in cuda_split_k_text.MERGE_SOURCE: the splits' weights
# exp2(max_s - max) go through threadgroup memory a tile of D splits at a time, so a thread's reads of the partial
# accumulators do not wait on each other (walking the splits one read after another took 11-21 us at B 1 on the H200,
# the tiles 6-8 us; on Apple GPUs not measured).
DECODE_MERGE_SOURCE = r"""
    const int bq = threadgroup_position_in_grid.x, d = thread_position_in_threadgroup.x;
    const int nsplit = part_ml_shape[1], bh = bq / G, g = bq % G;
    const device float* ml = part_ml + (size_t(bh) * nsplit * G + g) * 2;
    const device float* pa = part_acc + (size_t(bh) * nsplit * G + g) * D + d;
    threadgroup float w_tile[D];
    threadgroup float red[D / 32];
    float top = -1e30f;
    for (int s = d; s < nsplit; s += D) top = max(top, ml[size_t(s) * G * 2]);
    top = simd_max(top);
    if (thread_index_in_simdgroup == 0) red[simdgroup_index_in_threadgroup] = top;
    threadgroup_barrier(mem_flags::mem_threadgroup);
    top = -1e30f;
    for (int w = 0; w < D / 32; ++w) top = max(top, red[w]);
    float acc = 0.0f, lsum = 0.0f;
    for (int base = 0; base < nsplit; base += D) {
      const int n = min(D, nsplit - base);
      threadgroup_barrier(mem_flags::mem_threadgroup);
      if (d < n) {
        const float w = fast::exp2(ml[size_t(base + d) * G * 2] - top);
        w_tile[d] = w;
        lsum += w * ml[size_t(base + d) * G * 2 + 1];
      }
      threadgroup_barrier(mem_flags::mem_threadgroup);
      for (int j = 0; j < n; ++j) acc += w_tile[j] * pa[size_t(base + j) * G * D];
    }
    lsum = simd_sum(lsum);
    threadgroup_barrier(mem_flags::mem_threadgroup);
    if (thread_index_in_simdgroup == 0) red[simdgroup_index_in_threadgroup] = lsum;
    threadgroup_barrier(mem_flags::mem_threadgroup);
    float den = 0.0f;
    for (int w = 0; w < D / 32; ++w) den += red[w];
    o[size_t(bq) * D + d] = T(acc / den);
"""


# At most NF splits (a constant: MERGE_FEW, as for CUDA): one thread an output element reads every split's (max, sum)
# and accumulator at once, with no threadgroup memory and no barriers, so it waits for one round of reads, not three
# (the CUDA decode's one-read merge: 1.7-1.8 us against 2.9-3.3 on an H100; on Apple GPUs not measured). The grid is
# DECODE_MERGE_SOURCE's: B x Hq x D threads, D a threadgroup.
DECODE_MERGE_FEW_SOURCE = r"""
    const uint e = thread_position_in_grid.x;
    const int nsplit = part_ml_shape[1];
    const uint bq = e / D, bh = bq / G;
    const int d = e % D, g = bq % G;
    const device float* ml = part_ml + (size_t(bh) * nsplit * G + g) * 2;
    const device float* pa = part_acc + (size_t(bh) * nsplit * G + g) * D + d;
    float tops[NF], sums[NF], accs[NF];
    for (int s = 0; s < NF; ++s) {
      const bool here = s < nsplit;
      tops[s] = here ? ml[size_t(s) * G * 2] : -1e30f;
      sums[s] = here ? ml[size_t(s) * G * 2 + 1] : 0.0f;
      accs[s] = here ? pa[size_t(s) * G * D] : 0.0f;
    }
    float top = tops[0];
    for (int s = 1; s < NF; ++s) top = max(top, tops[s]);
    float acc = 0.0f, den = 0.0f;
    for (int s = 0; s < NF; ++s) {
      const float w = fast::exp2(tops[s] - top);
      acc = fma(w, accs[s], acc);
      den = fma(w, sums[s], den);
    }
    o[e] = T(acc / den);
"""


def supports_decode(q: Any, k_cache: Any, length: int) -> bool:
    b, hq, t, d = q.shape
    hkv = k_cache.shape[1]
    return t == 1 and d in (64, 128) and hq % hkv == 0 and hq // hkv <= 8 and 0 < length <= k_cache.shape[2]


@cache
def _decode_kernels(dtype: Any, d: int, g: int, warps: int, unroll: int) -> tuple[Any, Any, Any, Any]:
    """(split, merge, one split, merge of at most MERGE_FEW splits) of one (dtype, D, G, simdgroups, unroll), each
    with its template arguments as constants in its header (kernel_text.metal_constant_lines), made once."""
    split_args = (("T", dtype), ("D", d), ("G", g), ("NW", warps), ("U", unroll))
    split = metal_kernel(name="ks_decode_split", input_names=["q", "k_cache", "v_cache", "meta"],
                         output_names=["part_acc", "part_ml"], source=DECODE_SPLIT_SOURCE, constants=split_args)
    merge = metal_kernel(name="ks_decode_merge", input_names=["part_acc", "part_ml"], output_names=["o"],
                         source=DECODE_MERGE_SOURCE, constants=(("T", dtype), ("D", d), ("G", g)))
    one_split = metal_kernel(name="ks_decode_one_split", input_names=["q", "k_cache", "v_cache", "meta"],
                             output_names=["o"], source=DECODE_ONE_SPLIT_SOURCE, constants=split_args)
    merge_few = metal_kernel(name="ks_decode_merge_few", input_names=["part_acc", "part_ml"], output_names=["o"],
                             source=DECODE_MERGE_FEW_SOURCE, constants=(("T", dtype), ("D", d), ("G", g), ("NF", MERGE_FEW)))
    return split, merge, one_split, merge_few


@dataclass(frozen=True)
class MetalDecodeConfig:
    """`decode_metal`'s knobs, as `decode(..., config=)` and `ksearch bench decode --config` take them on a Mac:
    simdgroups a threadgroup, the threadgroups a call aims for, key rows each lane loads before using any. The
    defaults are the library's (none measured on Apple hardware)."""

    warps: int = 4
    target_blocks: int = 256
    unroll: int = 1

    def __post_init__(self) -> None:
        if self.warps not in (1, 2, 4, 8) or self.unroll not in (1, 2, 4) or self.target_blocks < 1:
            raise ValueError(f"{self}: warps 1, 2, 4 or 8, unroll 1, 2 or 4, target_blocks at least 1")

    def fits(self, g: int, d: int) -> bool:
        """Whether the split kernel's threadgroup memory (the simdgroups' partial results: NW x G x (D + 2) floats)
        stays within Apple's 32 KB for G query heads a kv head at head dim D (8 simdgroups of 8 heads at D=128 do
        not)."""
        return 4 * self.warps * g * (d + 2) <= 32 * 1024

    @classmethod
    def parse(cls, text: str) -> MetalDecodeConfig:
        """`unroll=2,warps=8` -> MetalDecodeConfig (fields not named keep their defaults); ValueError in one line."""
        return cls(**parse_fields(cls, text))


def decode_metal(q: Any, k_cache: Any, v_cache: Any, length: int, warps: int = 4, target_blocks: int = 256,
                 unroll: int = 1) -> Any:
    """unroll: key rows each lane loads before using them (1, as measured nowhere yet on Apple hardware: the CUDA
    kernel's best on the H200 is 4, `DecodeConfig`)."""
    import mlx.core as mx

    b, hq, _, d = q.shape
    hkv = k_cache.shape[1]
    g = hq // hkv
    step = warps * (32 // (d // 4)) * unroll
    chunk = max(128, math.ceil(length / max(1, target_blocks // (b * hkv))))
    chunk = math.ceil(chunk / step) * step
    nsplit = math.ceil(length / chunk)
    # The launches name the kernels as _decode_kernels does, so that a static read of this file (the Metal emulation's
    # compile checks, knowledge.extract) pairs each kernel with its launch and its dtypes.
    split, merge, one_split, merge_few = _decode_kernels(q.dtype, d, g, warps, unroll)
    meta = mx.array([length, chunk, nsplit], dtype=mx.int32)
    nt = warps * 32
    if nsplit == 1:  # the (batch, kv head) pairs fill target_blocks: one launch writes the output, no merge
        return one_split(inputs=[q, k_cache, v_cache, meta], grid=(b * hkv * nt, 1, 1), threadgroup=(nt, 1, 1),
                         output_shapes=[q.shape], output_dtypes=[q.dtype])[0]
    part_acc, part_ml = split(
        inputs=[q, k_cache, v_cache, meta], grid=(b * hkv * nt, nsplit, 1), threadgroup=(nt, 1, 1),
        output_shapes=[(b * hkv, nsplit, g, d), (b * hkv, nsplit, g, 2)], output_dtypes=[mx.float32, mx.float32])
    if nsplit <= MERGE_FEW:
        return merge_few(inputs=[part_acc, part_ml], grid=(b * hq * d, 1, 1), threadgroup=(d, 1, 1),
                         output_shapes=[q.shape], output_dtypes=[q.dtype])[0]
    return merge(inputs=[part_acc, part_ml], grid=(b * hq * d, 1, 1), threadgroup=(d, 1, 1),
                 output_shapes=[q.shape], output_dtypes=[q.dtype])[0]
