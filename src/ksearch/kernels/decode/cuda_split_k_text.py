"""The CUDA text of the split-K decode kernels (cuda_split_k.py launches them): the split kernel, with its steps' rows
through registers (the default) or a shared-memory ring, the fused variant that merges in its last block, and the
merge kernel. Kept apart from the launch code because the gqa_decode template family and the compile tests embed
the same text.
"""

from __future__ import annotations

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


def partial_scores(target: str) -> str:
    """A step's scores as this lane's partial dot products over its 8 columns, each stored to `target` (an
    expression of u and g)."""
    return r"""      #pragma unroll
      for (int u = 0; u < U; ++u) {
        float kf[8];
        ks_unpack8<T>(kr[u], kf);
        #pragma unroll
        for (int g = 0; g < G; ++g) {
          float a = 0.f;
          #pragma unroll
          for (int i = 0; i < 8; ++i) a = fmaf(qf[g][i], kf[i], a);
          """ + target + r""" = a;
        }
      }
"""


# One step of U keys a lane: scores, their butterfly, the online softmax (kr, vr hold the step's rows).
STEP_MATH = r"""      float s[U][G];
""" + partial_scores("s[u][g]") + r"""      // Butterfly over the LPK lanes of a key: every lane ends with the full score.
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

# The same merge for at most NF splits (a constant): one thread an output element, every split's (max, sum) and
# accumulator read at once, so the kernel waits for one round of L2 reads, not three (MERGE_SOURCE's largest max,
# weights and sums each wait for the reads before them, with the block's barriers between).
MERGE_FEW_SOURCE = r"""
    const size_t e = (size_t)blockIdx.x * blockDim.x + threadIdx.x;  // the output element (batch x query head, d)
    const int nsplit = part_ml_shape[1];
    const size_t bq = e / D, bh = bq / G;
    const int d = e % D, g = bq % G;
    const float* ml = part_ml + bh * nsplit * G * 2 + g * 2;      // split s: ml[s * G * 2], (max, sum)
    const float* pa = part_acc + bh * nsplit * G * D + g * D + d;  // split s: pa[s * G * D]
    float2 v[NF];
    float a[NF];
    #pragma unroll
    for (int s = 0; s < NF; ++s) {
      v[s] = s < nsplit ? *reinterpret_cast<const float2*>(ml + (size_t)s * G * 2) : make_float2(-1e30f, 0.f);
      a[s] = s < nsplit ? pa[(size_t)s * G * D] : 0.f;
    }
    float top = v[0].x;
    #pragma unroll
    for (int s = 1; s < NF; ++s) top = fmaxf(top, v[s].x);
    float acc = 0.f, den = 0.f;
    #pragma unroll
    for (int s = 0; s < NF; ++s) {
      const float w = exp2f(v[s].x - top);
      acc = fmaf(w, a[s], acc);
      den = fmaf(w, v[s].y, den);
    }
    o[e] = (T)(acc / den);
"""
