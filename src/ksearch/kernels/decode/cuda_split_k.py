"""Split-K flash-decoding for MLX-CUDA: one GQA decode step against a KV cache of fixed capacity.

Pass 1 (`split` kernel): one block per (batch, kv head, split of the valid keys). All G = Hq / Hkv query heads of the kv
head live in the same block, so each K/V row is read from HBM exactly once. A key row of D halves is shared by D/8 lanes
that each load 16 bytes (one `uint4`), so a warp reads 512 contiguous bytes per key step; U key steps are issued
before the first use to keep enough loads in flight for HBM. Scores use the exp2 trick (q is pre-scaled by
log2(e)/sqrt(D)); each lane keeps an online-softmax state per query head; the warp then the block merge their states,
and the block writes its un-normalised partial (max, sum, acc[D]) per head in fp32.
Pass 2: the last block of each (batch, head block) to finish combines the splits with a log-sum-exp merge (FUSED, one
launch; an atomic counter says who is last), or a separate `merge` kernel with one block per (batch, query head).
Only keys [0, length) are read: K/V are passed as views `cache[:, :, :length]` (no copy, strides honoured), so one
compiled kernel serves every length and a call creates no device scalars.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from functools import cache, lru_cache
from typing import Any

HEADER = r"""
// Guarded: a checker may compile several kernels of one candidate in one translation unit.
#ifndef KS_DECODE_HEADER
#define KS_DECODE_HEADER
// Conversions shared by the attention/decode kernels: 8 packed 16-bit values <-> fp32.
template <typename T> struct KsPack;
template <> struct KsPack<__half> {
  static __device__ __forceinline__ float2 f2(unsigned u) {
    __half2 h = *reinterpret_cast<__half2*>(&u); return __half22float2(h);
  }
};
template <> struct KsPack<__nv_bfloat16> {
  static __device__ __forceinline__ float2 f2(unsigned u) {
    __nv_bfloat162 h = *reinterpret_cast<__nv_bfloat162*>(&u); return __bfloat1622float2(h);
  }
};
template <typename T> __device__ __forceinline__ void ks_unpack8(const uint4& r, float* f) {
  float2 a = KsPack<T>::f2(r.x), b = KsPack<T>::f2(r.y), c = KsPack<T>::f2(r.z), d = KsPack<T>::f2(r.w);
  f[0] = a.x; f[1] = a.y; f[2] = b.x; f[3] = b.y; f[4] = c.x; f[5] = c.y; f[6] = d.x; f[7] = d.y;
}
#endif
"""

# Template constants: T, D (head dim), G (query heads per kv head), NW (warps per block), U (key steps in flight).
SPLIT_HEAD = r"""
    constexpr int LPK = D / 8;          // lanes sharing one key row (16 B each)
    constexpr int KPW = 32 / LPK;       // keys per warp per step
    constexpr int STEP = NW * KPW * U;  // keys per block iteration
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int sub = lane / LPK, part = lane % LPK;
    const int bh = blockIdx.x;          // b * (Hq / G) + head block; G = Hq / Hkv (all heads of a kv head) by default
    const int split = blockIdx.y, nsplit = gridDim.y;
    // k/v arrive as views k_cache[:, :, :length] (no copy): their shape carries the length, strides the layout.
    const int Hkv = k_shape[1], len = k_shape[2];
    const int hpb = q_shape[1] / G, grp = q_shape[1] / Hkv;
    const int b = bh / hpb, hb = bh % hpb, hk = hb * G / grp;
    const int chunk = ((len + nsplit - 1) / nsplit + STEP - 1) / STEP * STEP;
    const int start = split * chunk;
    // 16-byte loads need rows 16-byte aligned: a layout we cannot load reads nothing and gives NaN (below), never a
    // misaligned access (which would poison the process's CUDA context) or a silently wrong number.
    const bool dense_rows = k_strides[3] == 1 && v_strides[3] == 1 && q_strides[3] == 1
        && ((k_strides[0] | k_strides[1] | k_strides[2] | v_strides[0] | v_strides[1] | v_strides[2]
             | q_strides[0] | q_strides[1]) & 7) == 0
        && ((reinterpret_cast<unsigned long long>(k) | reinterpret_cast<unsigned long long>(v)
             | reinterpret_cast<unsigned long long>(q)) & 15) == 0;
    const int end = dense_rows ? min(len, start + chunk) : start;

    // q pre-scaled by log2(e)/sqrt(D): scores come out in the exp2 domain.
    const float qscale = 1.4426950408889634f * rsqrtf((float)D);
    float qf[G][8];
    #pragma unroll
    for (int g = 0; g < G; ++g) {
      uint4 r = dense_rows
          ? *reinterpret_cast<const uint4*>(q + b * q_strides[0] + (hb * G + g) * q_strides[1] + part * 8)
          : make_uint4(0, 0, 0, 0);
      ks_unpack8<T>(r, qf[g]);
      #pragma unroll
      for (int i = 0; i < 8; ++i) qf[g][i] *= qscale;
    }
    // Finite floor instead of -inf: a state that has seen no key yet must not produce inf - inf.
    float m[G], l[G], acc[G][8];
    #pragma unroll
    for (int g = 0; g < G; ++g) {
      m[g] = -1e30f; l[g] = 0.f;
      #pragma unroll
      for (int i = 0; i < 8; ++i) acc[g][i] = 0.f;
    }
    const T* kb = k + b * k_strides[0] + hk * k_strides[1] + part * 8;
    const T* vb = v + b * v_strides[0] + hk * v_strides[1] + part * 8;
    const int64_t ksj = k_strides[2], vsj = v_strides[2];

"""
# One step of U keys a lane: scores, their butterfly, the online softmax (kr, vr hold the step's rows).
STEP_MATH = r"""      float s[U][G];
      #pragma unroll
      for (int u = 0; u < U; ++u) {
        float kf[8];
        ks_unpack8<T>(kr[u], kf);
        #pragma unroll
        for (int g = 0; g < G; ++g) {
          float a = 0.f;
          #pragma unroll
          for (int i = 0; i < 8; ++i) a = fmaf(qf[g][i], kf[i], a);
          s[u][g] = a;
        }
      }
      // Butterfly over the LPK lanes of a key: every lane ends with the full score.
      #pragma unroll
      for (int off = LPK / 2; off > 0; off /= 2) {
        #pragma unroll
        for (int u = 0; u < U; ++u) {
          #pragma unroll
          for (int g = 0; g < G; ++g) s[u][g] += __shfl_xor_sync(0xffffffffu, s[u][g], off);
        }
      }
      #pragma unroll
      for (int u = 0; u < U; ++u) {
        if (j0 + u * KPW + sub >= end) {
          #pragma unroll
          for (int g = 0; g < G; ++g) s[u][g] = -INFINITY;
        }
      }
      // One rescale per U keys rather than per key.
      #pragma unroll
      for (int g = 0; g < G; ++g) {
        float mn = m[g];
        #pragma unroll
        for (int u = 0; u < U; ++u) mn = fmaxf(mn, s[u][g]);
        float corr = exp2f(m[g] - mn);
        m[g] = mn;
        l[g] *= corr;
        #pragma unroll
        for (int i = 0; i < 8; ++i) acc[g][i] *= corr;
        #pragma unroll
        for (int u = 0; u < U; ++u) {
          float p = exp2f(s[u][g] - mn);
          l[g] += p;
          float vf[8];
          ks_unpack8<T>(vr[u], vf);
          #pragma unroll
          for (int i = 0; i < 8; ++i) acc[g][i] = fmaf(p, vf[i], acc[g][i]);
        }
      }
"""
# The steps' rows through registers: the next step's loads issued before this step's math (PREFETCH).
REGISTER_LOOP = r"""    uint4 kr[U], vr[U];
    int j0 = start + warp * KPW * U;
    #pragma unroll
    for (int u = 0; u < U; ++u) {
      int j = j0 + u * KPW + sub;
      kr[u] = j < end ? __ldcs(reinterpret_cast<const uint4*>(kb + j * ksj)) : make_uint4(0, 0, 0, 0);
      vr[u] = j < end ? __ldcs(reinterpret_cast<const uint4*>(vb + j * vsj)) : make_uint4(0, 0, 0, 0);
    }
    for (; j0 < end; j0 += STEP) {
      // Issue the next step's loads before this step's math (PREFETCH): HBM latency hides behind the FMAs.
      uint4 kn[U], vn[U];
      if (PREFETCH) {
        #pragma unroll
        for (int u = 0; u < U; ++u) {
          int j = j0 + STEP + u * KPW + sub;
          kn[u] = j < end ? __ldcs(reinterpret_cast<const uint4*>(kb + j * ksj)) : make_uint4(0, 0, 0, 0);
          vn[u] = j < end ? __ldcs(reinterpret_cast<const uint4*>(vb + j * vsj)) : make_uint4(0, 0, 0, 0);
        }
      }
""" + STEP_MATH + r"""      #pragma unroll
      for (int u = 0; u < U; ++u) {
        if (PREFETCH) {
          kr[u] = kn[u]; vr[u] = vn[u];
        } else {
          int j = j0 + STEP + u * KPW + sub;
          kr[u] = j < end ? __ldcs(reinterpret_cast<const uint4*>(kb + j * ksj)) : make_uint4(0, 0, 0, 0);
          vr[u] = j < end ? __ldcs(reinterpret_cast<const uint4*>(vb + j * vsj)) : make_uint4(0, 0, 0, 0);
        }
      }
    }
"""
# The steps' rows through shared memory instead (RING stages, DecodeConfig.ring): each lane copies its own 16-byte
# rows of the step RING - 1 ahead with cp.async (zero-filled past the end) and reads back only what it copied, so no
# barrier is needed and the bytes in flight take no registers.
RING_LOOP = r"""
    __shared__ __align__(16) uint4 ks_ring[RING][2 * U][NW * 32];
    uint4 kr[U], vr[U];
    int j0 = start + warp * KPW * U;
    auto issue = [&](int first, int slot) {
      #pragma unroll
      for (int u = 0; u < U; ++u) {
        const int j = first + u * KPW + sub;
        const int n = j < end ? 16 : 0;
        const T* ksrc = kb + (n ? j : start) * ksj;
        const T* vsrc = vb + (n ? j : start) * vsj;
        asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::
                     "r"((unsigned)__cvta_generic_to_shared(&ks_ring[slot][u][threadIdx.x])), "l"(ksrc), "r"(n));
        asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::
                     "r"((unsigned)__cvta_generic_to_shared(&ks_ring[slot][U + u][threadIdx.x])), "l"(vsrc), "r"(n));
      }
      asm volatile("cp.async.commit_group;\n" ::);
    };
    if (j0 < end) {
      #pragma unroll
      for (int r = 0; r < RING - 1; ++r) issue(j0 + r * STEP, r);
    }
    for (int it = 0; j0 < end; j0 += STEP, ++it) {
      issue(j0 + (RING - 1) * STEP, (it + RING - 1) % RING);
      asm volatile("cp.async.wait_group %0;\n" :: "n"(RING - 1));
      const int slot = it % RING;
      #pragma unroll
      for (int u = 0; u < U; ++u) {
        kr[u] = ks_ring[slot][u][threadIdx.x];
        vr[u] = ks_ring[slot][U + u][threadIdx.x];
      }
""" + STEP_MATH + r"""    }
    asm volatile("cp.async.wait_all;\n" ::);
"""
SPLIT_TAIL = r"""    // Merge the KPW key groups of the warp (lanes part, part + LPK, ...).
    #pragma unroll
    for (int off = LPK; off < 32; off *= 2) {
      #pragma unroll
      for (int g = 0; g < G; ++g) {
        float mo = __shfl_xor_sync(0xffffffffu, m[g], off);
        float lo = __shfl_xor_sync(0xffffffffu, l[g], off);
        float mn = fmaxf(m[g], mo);
        float a = exp2f(m[g] - mn), b = exp2f(mo - mn);
        l[g] = l[g] * a + lo * b;
        #pragma unroll
        for (int i = 0; i < 8; ++i) {
          float ao = __shfl_xor_sync(0xffffffffu, acc[g][i], off);
          acc[g][i] = acc[g][i] * a + ao * b;
        }
        m[g] = mn;
      }
    }
    __shared__ float sm_m[NW][G], sm_l[NW][G];
    __shared__ float sm_acc[NW][G][D];
    if (sub == 0) {
      #pragma unroll
      for (int g = 0; g < G; ++g) {
        if (part == 0) { sm_m[warp][g] = m[g]; sm_l[warp][g] = l[g]; }
        #pragma unroll
        for (int i = 0; i < 8; ++i) sm_acc[warp][g][part * 8 + i] = acc[g][i];
      }
    }
    __syncthreads();
    // Merge the warps and write this split's partial: part_acc[bh][split][g][d], part_ml[bh][split][g][2].
    for (int e = threadIdx.x; e < G * D; e += NW * 32) {
      int g = e / D, d = e % D;
      float mn = -1e30f;
      #pragma unroll
      for (int w = 0; w < NW; ++w) mn = fmaxf(mn, sm_m[w][g]);
      float ls = 0.f, as = 0.f;
      #pragma unroll
      for (int w = 0; w < NW; ++w) {
        float c = exp2f(sm_m[w][g] - mn);
        ls += sm_l[w][g] * c;
        as += sm_acc[w][g][d] * c;
      }
      size_t row = ((size_t)bh * nsplit + split) * G + g;
      // A layout we do not handle (see dense_rows) gives NaN, never a silently wrong number.
      part_acc[row * D + d] = dense_rows ? as : __int_as_float(0x7fc00000);
      if (d == 0) { part_ml[row * 2] = mn; part_ml[row * 2 + 1] = ls; }
    }
"""
SPLIT_SOURCE = SPLIT_HEAD + REGISTER_LOOP + SPLIT_TAIL
SPLIT_RING_SOURCE = SPLIT_HEAD + RING_LOOP + SPLIT_TAIL

# FUSED variant: one launch and one graph node (the separate merge kernel is a second MLX primitive, ~8 us of host
# dispatch at B=1, as much as the whole 4k-key read). Its outputs are o and one float32 work buffer, both
# zero-initialised (`init_value`: one fill each): per (batch, head block) an arrival counter, then the splits' (max,
# sum) pairs, then their accumulators, each region 16-byte aligned. The last block of a (batch, head block) to arrive
# merges every split, all its warps at once: the largest max per head first, then each warp sums a share of the splits
# with independent 16-byte L2 reads, then the warps' sums through shared memory. Neither this nor the first version
# (one thread per output element walking every split in turn: 37.3 against two launches' 30.6 us a call at B=1,
# S=4096, mlx-cuda-overhead-nvidia-h200.json) beat two launches: 0.875x-0.928x of native against 0.886x-0.953x side
# by side (benchmarks/results/decode-versus-native-queued-*.json), so it stays opt-in.
FUSED_HEAD = r"""
    // The work buffer's regions (floats): counters, (max, sum) pairs, accumulators.
    const size_t ks_nbh = gridDim.x, ks_ns = gridDim.y;
    const size_t ks_ml_off = (ks_nbh + 3) / 4 * 4;
    const size_t ks_acc_off = ks_ml_off + (ks_nbh * ks_ns * G * 2 + 3) / 4 * 4;
    int* counter = reinterpret_cast<int*>(work);
    float* part_ml = work + ks_ml_off;
    float* part_acc = work + ks_acc_off;
"""
FUSED_TAIL = r"""
    __threadfence();  // this block's partials reach L2 before the counter says so
    __syncthreads();
    __shared__ int ks_is_last;
    if (threadIdx.x == 0) ks_is_last = atomicAdd(&counter[bh], 1) == nsplit - 1;
    __syncthreads();
    if (!ks_is_last) return;
    __threadfence();
    const float* ml = part_ml + (size_t)bh * nsplit * G * 2;
    const float* pa = part_acc + (size_t)bh * nsplit * G * D;
    // 1. The largest max per head over every split (other blocks wrote these: L2 reads).
    __shared__ float ks_top[G];
    float top[G];
    #pragma unroll
    for (int g = 0; g < G; ++g) top[g] = -1e30f;
    for (int sp = threadIdx.x; sp < nsplit; sp += NW * 32) {
      #pragma unroll
      for (int g = 0; g < G; ++g) top[g] = fmaxf(top[g], __ldcg(ml + (sp * G + g) * 2));
    }
    #pragma unroll
    for (int g = 0; g < G; ++g) {
      #pragma unroll
      for (int off = 16; off > 0; off /= 2) top[g] = fmaxf(top[g], __shfl_xor_sync(0xffffffffu, top[g], off));
      if (lane == 0) sm_m[warp][g] = top[g];
    }
    __syncthreads();
    if (threadIdx.x < G) {
      float t = -1e30f;
      #pragma unroll
      for (int w = 0; w < NW; ++w) t = fmaxf(t, sm_m[w][threadIdx.x]);
      ks_top[threadIdx.x] = t;
    }
    __syncthreads();
    // 2. Warp w sums splits w, w + NW, ...; lane i holds float4 number i, i + 32, ... of the G x D accumulator.
    constexpr int V4 = G * D / 4, PER = (V4 + 31) / 32;
    float4 as[PER];
    float ls[PER];
    #pragma unroll
    for (int p = 0; p < PER; ++p) { as[p] = make_float4(0.f, 0.f, 0.f, 0.f); ls[p] = 0.f; }
    #pragma unroll 2
    for (int sp = warp; sp < nsplit; sp += NW) {
      #pragma unroll
      for (int p = 0; p < PER; ++p) {
        const int i = lane + p * 32;
        if (i < V4) {
          const int g = i * 4 / D;
          const float2 mlv = __ldcg(reinterpret_cast<const float2*>(ml + (sp * G + g) * 2));
          const float c = exp2f(mlv.x - ks_top[g]);
          const float4 a = __ldcg(reinterpret_cast<const float4*>(pa + (size_t)sp * G * D) + i);
          as[p].x = fmaf(c, a.x, as[p].x); as[p].y = fmaf(c, a.y, as[p].y);
          as[p].z = fmaf(c, a.z, as[p].z); as[p].w = fmaf(c, a.w, as[p].w);
          ls[p] = fmaf(c, mlv.y, ls[p]);
        }
      }
    }
    // 3. The warps' sums through shared memory (sm_acc, sm_l: free since the partial above was written).
    __syncthreads();
    #pragma unroll
    for (int p = 0; p < PER; ++p) {
      const int i = lane + p * 32;
      if (i < V4) {
        const int g = i * 4 / D, d = i * 4 % D;
        sm_acc[warp][g][d] = as[p].x; sm_acc[warp][g][d + 1] = as[p].y;
        sm_acc[warp][g][d + 2] = as[p].z; sm_acc[warp][g][d + 3] = as[p].w;
        if (d == 0) sm_l[warp][g] = ls[p];
      }
    }
    __syncthreads();
    for (int e = threadIdx.x; e < G * D; e += NW * 32) {
      const int g = e / D, d = e % D;
      float num = 0.f, den = 0.f;
      #pragma unroll
      for (int w = 0; w < NW; ++w) { num += sm_acc[w][g][d]; den += sm_l[w][g]; }
      o[((size_t)bh * G + g) * D + d] = (T)(num / den);
    }
"""
FUSED_SOURCE = FUSED_HEAD + SPLIT_SOURCE + FUSED_TAIL


def work_floats(blocks: int, nsplit: int, g: int, d: int) -> int:
    """The fused kernel's work buffer in floats: the regions FUSED_HEAD lays out, each rounded up to 4 floats."""
    def up(n: int) -> int:
        return (n + 3) // 4 * 4

    return up(blocks) + up(blocks * nsplit * g * 2) + blocks * nsplit * g * d

# One block of D threads per (batch, query head); T, D, G as above. The splits' weights exp2(max_s - max) go through
# shared memory a tile of D splits at a time, so a thread's reads of the accumulators are independent of each other
# and several are in flight (unrolled); walking the splits one by one, each read waiting for the one before, took 11
# and 20 us at B 1 with 32 and 64 splits (ncu, base clocks), a third of the split kernel's own time. (A merge with the
# splits shared among 256 threads, each taking every 8th split online, measured no faster when a call's Python work
# still hid the GPU's: benchmarks/findings.md.)
MERGE_SOURCE = r"""
    const int bq = blockIdx.x;
    const int d = threadIdx.x;
    const int nsplit = part_ml_shape[1];
    const int bh = bq / G, g = bq % G;
    const float* ml = part_ml + (size_t)bh * nsplit * G * 2 + g * 2;      // split s: ml[s * G * 2], (max, sum)
    const float* pa = part_acc + (size_t)bh * nsplit * G * D + g * D + d;  // split s: pa[s * G * D]
    __shared__ float ks_w[D];
    __shared__ float ks_red[D / 32];
    // 1. The largest max over the splits.
    float top = -1e30f;
    for (int s = d; s < nsplit; s += D) top = fmaxf(top, ml[(size_t)s * G * 2]);
    #pragma unroll
    for (int off = 16; off > 0; off /= 2) top = fmaxf(top, __shfl_xor_sync(0xffffffffu, top, off));
    if (d % 32 == 0) ks_red[d / 32] = top;
    __syncthreads();
    top = -1e30f;
    #pragma unroll
    for (int w = 0; w < D / 32; ++w) top = fmaxf(top, ks_red[w]);
    // 2. Tiles of D splits: their weights into shared memory, then each thread's element of the weighted sum.
    float acc = 0.f, lsum = 0.f;
    for (int base = 0; base < nsplit; base += D) {
      const int n = min(D, nsplit - base);
      __syncthreads();  // everyone is done with the previous tile's weights (and with ks_red)
      if (d < n) {
        const float2 v = *reinterpret_cast<const float2*>(ml + (size_t)(base + d) * G * 2);
        const float w = exp2f(v.x - top);
        ks_w[d] = w;
        lsum = fmaf(w, v.y, lsum);
      }
      __syncthreads();
      #pragma unroll 8
      for (int j = 0; j < n; ++j) acc = fmaf(ks_w[j], pa[(size_t)(base + j) * G * D], acc);
    }
    // 3. The denominator: the threads' shares of the weighted sums.
    #pragma unroll
    for (int off = 16; off > 0; off /= 2) lsum += __shfl_xor_sync(0xffffffffu, lsum, off);
    __syncthreads();
    if (d % 32 == 0) ks_red[d / 32] = lsum;
    __syncthreads();
    float den = 0.f;
    #pragma unroll
    for (int w = 0; w < D / 32; ++w) den += ks_red[w];
    o[(size_t)bq * D + d] = (T)(acc / den);
"""


@dataclass(frozen=True)
class DecodeConfig:
    warps: int = 4          # warps per block of the split kernel
    unroll: int = 4         # key steps in flight per warp (the sweep's best on the H200, with the defaults below)
    prefetch: bool = True   # load step i+1 into registers while computing step i
    target_blocks: int = 1056  # aim for ~8 blocks per SM on an H200 (132 SMs); 1 = no split
    # Keys per split at least: 512 beat 128 by 3-6% as a geomean over `bench decode`'s shapes, in two processes on
    # the H200, mostly at B 1 (findings.md); at B 16 the chunks are longer anyway.
    min_chunk: int = 512
    group_heads: bool = True  # all query heads of a kv head in one block (K/V read once) vs one head per block
    # Last block merges (one launch, FUSED_SOURCE) vs a separate merge kernel.
    fused: bool = False
    # > 0: launch bounds asking ptxas for this many resident blocks an SM (registers capped to fit; it spills past
    # that). 0: ptxas's choice (168 registers with the defaults: three blocks of four warps an SM on Hopper).
    min_blocks: int = 0
    # > 0: the steps' rows go through shared memory, this many steps in the ring (RING_LOOP), instead of registers.
    ring: int = 0

    def keys_per_step(self, d: int) -> int:
        return self.warps * (32 // (d // 8)) * self.unroll

    def shared_bytes(self, g: int, d: int) -> int:
        """Static shared memory of the split kernel a block: the warps' merge, and the ring where there is one."""
        merge = self.warps * g * (d + 2) * 4
        return merge + (self.ring * 2 * self.unroll * self.warps * 32 * 16 if self.ring else 0)

    @classmethod
    def parse(cls, text: str) -> DecodeConfig:
        """`warps=8,unroll=4,fused=1` -> DecodeConfig (fields not named keep their defaults); ValueError naming the
        fields there are for an unknown one, and for a value that is not an integer."""
        return cls(**parse_fields(cls, text))


def parse_fields(cls: type, text: str) -> dict[str, Any]:
    """`a=1,b=0` -> keyword arguments for the dataclass `cls`, whose fields are all integers or booleans."""
    fields = {f.name: type(getattr(cls(), f.name)) for f in dataclasses.fields(cls)}
    kwargs: dict[str, Any] = {}
    for item in filter(None, text.replace(" ", "").split(",")):
        key, _, value = item.partition("=")
        if key not in fields:
            raise ValueError(f"unknown {cls.__name__} field {key!r}; fields: {', '.join(fields)}")
        try:
            number = int(value)
        except ValueError:
            raise ValueError(f"{key}={value!r}: give an integer (0 or 1 for {key})" if fields[key] is bool
                             else f"{key}={value!r}: give an integer") from None
        kwargs[key] = bool(number) if fields[key] is bool else number
    return kwargs


def supports(q: Any, k_cache: Any, length: int) -> bool:
    """Whether the kernel takes q against positions [0, length) of this cache (launch_for's checks)."""
    return launch_for(q, k_cache, k_cache, DEFAULT) is not None and 0 < length <= k_cache.shape[2]


def plan(blocks: int, length: int, d: int, cfg: DecodeConfig) -> tuple[int, int]:
    """(nsplit, chunk) for `blocks` (batch x head-block) blocks: enough splits to fill the GPU, chunks a multiple of
    the block's key step."""
    chunk = chunk_keys(length, max(1, cfg.target_blocks // max(1, blocks)), cfg.keys_per_step(d), cfg.min_chunk)
    return -(-length // chunk), chunk


def chunk_keys(length: int, want: int, step: int, min_chunk: int) -> int:
    """Keys a split reads: the length over `want` splits, at least `min_chunk`, rounded up to whole steps."""
    chunk = max(min_chunk, -(-length // want))
    return -(-chunk // step) * step


def launch_bounds(threads: int, min_blocks: int) -> str:
    """MLX writes the `__global__` line itself, so launch bounds ride on a redefinition of `__global__`."""
    return ("\n#undef __global__\n#define __global__ __attribute__((global)) "
            f"__attribute__((launch_bounds({threads}, {min_blocks})))\n")


@cache
def _kernels(cfg: DecodeConfig) -> tuple[Any, Any | None]:
    import mlx.core as mx

    # MLX keys a compiled kernel by its name and template arguments, not its header: the bounds go in the name.
    tag = f"w{cfg.warps}_u{cfg.unroll}" + (f"_b{cfg.min_blocks}" if cfg.min_blocks else "") \
        + (f"_r{cfg.ring}" if cfg.ring else "")
    header = HEADER + (launch_bounds(cfg.warps * 32, cfg.min_blocks) if cfg.min_blocks else "")
    if cfg.fused:
        fused = mx.fast.cuda_kernel(
            name=f"ks_decode_fused_{tag}", input_names=["q", "k", "v"],
            output_names=["o", "work"], source=FUSED_SOURCE, header=header,
            ensure_row_contiguous=False)
        return fused, None
    split = mx.fast.cuda_kernel(
        name=f"ks_decode_split_{tag}", input_names=["q", "k", "v"],
        output_names=["part_acc", "part_ml"], source=SPLIT_RING_SOURCE if cfg.ring else SPLIT_SOURCE, header=header,
        ensure_row_contiguous=False)
    merge = mx.fast.cuda_kernel(name="ks_decode_merge", input_names=["part_acc", "part_ml"], output_names=["o"],
                                source=MERGE_SOURCE)
    return split, merge


@dataclass(frozen=True)
class Launch:
    """What a call's launch needs that does not depend on the length, worked out once per shapes, dtype and
    configuration: at B 1 a call's Python work (this module's arithmetic and argument lists as much as MLX's graph
    building) was half its time on the H200 (benchmarks/results/process-trace-*.json). The kernels themselves are
    made at the first call (`_kernels`), so that a launch can be planned where CUDA is absent."""
    cfg: DecodeConfig
    blocks: int
    g: int
    d: int
    step: int     # keys per block iteration
    want: int     # splits that would fill the GPU
    template: list[tuple[str, Any]]
    threadgroup: tuple[int, int, int]
    threads: int
    merge: dict[str, Any]

    def nsplit(self, length: int) -> int:
        """plan()'s split count."""
        return -(-length // chunk_keys(length, self.want, self.step, self.cfg.min_chunk))


def launch_for(q: Any, k_cache: Any, v_cache: Any, cfg: DecodeConfig) -> Launch | None:
    """The launch for these inputs, or None where the kernel does not fit them (supports(), length aside, and
    caches of one shape)."""
    return _checked_launch(q.shape, k_cache.shape, v_cache.shape, q.dtype, k_cache.dtype, cfg)


@lru_cache(maxsize=256)
def _checked_launch(qshape: tuple[int, ...], kshape: tuple[int, ...], vshape: tuple[int, ...], dtype: Any,
                    kdtype: Any, cfg: DecodeConfig) -> Launch | None:
    import mlx.core as mx

    b, hq, t, d = qshape
    hkv = kshape[1]
    if dtype not in (mx.float16, mx.bfloat16) or kdtype != dtype or vshape != kshape or t != 1 or d not in (64, 128) \
            or hq % hkv or hq // hkv > 8:
        return None
    return _launch(b, hq, hkv, d, dtype, cfg)


@lru_cache(maxsize=256)
def _launch(b: int, hq: int, hkv: int, d: int, dtype: Any, cfg: DecodeConfig) -> Launch:
    g = hq // hkv if cfg.group_heads else 1
    if cfg.ring and (cfg.fused or cfg.ring < 2):
        raise ValueError(f"ring={cfg.ring}: a ring has 2 steps at least and is not made for the fused kernel")
    if cfg.shared_bytes(g, d) > MAX_STATIC_SHARED:
        raise ValueError(f"{cfg} needs {cfg.shared_bytes(g, d)} bytes of shared memory a block at G {g}, D {d}; "
                         f"MLX's kernels get {MAX_STATIC_SHARED}: lower ring, unroll or warps")
    nt = cfg.warps * 32
    blocks = b * hq // g
    merge = {"template": [("T", dtype), ("D", d), ("G", g)], "grid": (b * hq * d, 1, 1),
             "threadgroup": (d, 1, 1), "output_shapes": [(b, hq, 1, d)], "output_dtypes": [dtype]}
    return Launch(cfg, blocks, g, d, cfg.keys_per_step(d),
                  max(1, cfg.target_blocks // max(1, blocks)),
                  [("T", dtype), ("D", d), ("G", g), ("NW", cfg.warps), ("U", cfg.unroll), ("PREFETCH", cfg.prefetch)]
                  + ([("RING", cfg.ring)] if cfg.ring else []),
                  (nt, 1, 1), nt, merge)


DEFAULT = DecodeConfig()
#: Static shared memory a block may declare (MLX's custom kernels set no larger dynamic size).
MAX_STATIC_SHARED = 48 * 1024


def decode_cuda(q: Any, k_cache: Any, v_cache: Any, length: int, cfg: DecodeConfig | None = None) -> Any:
    """v_cache must have k_cache's shape (decode_plan checks)."""
    b, hq, _, d = q.shape
    return decode_with(_launch(b, hq, k_cache.shape[1], d, q.dtype, cfg or DEFAULT), q, k_cache, v_cache, length)


def decode_with(launch: Launch, q: Any, k_cache: Any, v_cache: Any, length: int) -> Any:
    """One call with a launch worked out before. The kernel takes the length from K's view and V's layout from V's
    strides, so V goes in whole (one slice less to build and dispatch a call)."""
    import mlx.core as mx

    split, merge = _kernels(launch.cfg)
    nsplit = launch.nsplit(length)
    # Views, not copies: the kernel reads strides, and the K view's shape tells it the length (no per-call scalars).
    inputs = [q, k_cache[:, :, :length], v_cache]
    grid = (launch.blocks * launch.threads, nsplit, 1)
    blocks, g, d = launch.blocks, launch.g, launch.d
    if launch.cfg.fused:
        return split(inputs=inputs, output_shapes=[q.shape, (work_floats(blocks, nsplit, g, d),)],
                     output_dtypes=[q.dtype, mx.float32], init_value=0, grid=grid, threadgroup=launch.threadgroup,
                     template=launch.template)[0]
    part_acc, part_ml = split(
        inputs=inputs, output_shapes=[(blocks, nsplit, g, d), (blocks, nsplit, g, 2)],
        output_dtypes=[mx.float32, mx.float32], grid=grid, threadgroup=launch.threadgroup, template=launch.template)
    assert merge is not None
    return merge(inputs=[part_acc, part_ml], **launch.merge)[0]


def merge_partials(part_acc: Any, part_ml: Any, q: Any) -> Any:
    """The log-sum-exp merge of split partials part_acc (blocks, nsplit, G, D) and part_ml (blocks, nsplit, G, 2),
    blocks = B x Hq / G, into the output (q's shape and dtype)."""
    b, hq, _, d = q.shape
    merge_k = _kernels(DEFAULT)[1]
    assert merge_k is not None
    return merge_k(inputs=[part_acc, part_ml], template=[("T", q.dtype), ("D", d), ("G", part_acc.shape[2])],
                   grid=(b * hq * d, 1, 1), threadgroup=(d, 1, 1), output_shapes=[q.shape],
                   output_dtypes=[q.dtype])[0]
