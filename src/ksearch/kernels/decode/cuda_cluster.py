"""GQA decode for Hopper with scores and P V on tensor cores: in one launch, the splits of a (batch, kv head) merged
across a thread-block cluster (SOURCE), or without clusters, each split's partial merged by split-K's merge kernel in
a second launch (PARTS_SOURCE, `ClusterConfig(cluster=False)`: "mma_split", safe under MLX's CUDA graphs).

Why not the split-K kernel (cuda_split_k.py): it spends ~46 instructions a key a warp on CUDA cores (FMAs, shuffles,
conversions), reaching 3.1-3.5 TB/s at the large shapes (0.80x-0.97x of cuDNN), and it merges its splits in a second
launch (a second MLX graph node, ~7 us of host dispatch at small shapes, where the whole read takes ~4 us).

Per block, PW producer warps stream the key rows of one (batch, kv head, split) into shared memory with 16-byte
`cp.async`, chunks XOR-swizzled by row so that `ldmatrix` hits distinct banks, and each lane's copies arrive on the
slot's "full" mbarrier when they land (`cp.async.mbarrier.arrive.noinc`). (One bulk copy a row, the first version,
streamed only 5-15 GB/s a block; one a tile cannot be swizzled: benchmarks/findings.md.) NC consumer warps take whole tiles
of BK keys in turn, each from its own SPW slots: S = Q K^T by `mma.sync` m16n8k16 with the G query heads of the kv head
as the M rows (padded to 16: the tensor cores have room to spare, what counts is the instruction count), online
softmax in fp32 with the exp2 trick, P straight from S's accumulators into P V (V through `ldmatrix.trans`). The
warps merge in shared memory; the CS splits of one (batch, kv head) form one cluster (`__cluster_dims__`, at most 8
blocks) and merge through distributed shared memory, each rank writing a slice of the output. One kernel, one graph
node, no zero-initialised scratch (the one-launch split-K variant needed an atomic counter and MLX's fill for it).

Both opt-in. The cluster kernel only with MLX's CUDA graphs off (MLX_USE_CUDA_GRAPHS=0 before MLX starts): under MLX
0.32.4's graphs,
once a kernel with cluster dims has run, later custom kernels without them silently do not run (reproduced by
benchmarks/experiments/cluster_graph_hazard.py; docs/kernels-attention.md). Measured on the H200 with graphs off: 1.22x of
native as a geometric mean over `ksearch bench decode`'s shapes, where split-K gives 1.14x; but graphs off slows
native as well (B 16, 16k: 373 us, 258 us with graphs on), so it pays only where graphs are off anyway. mma_split,
under graphs: 0.82x-0.94x of native side by side (split-K 0.84x-0.95x), ahead of split-K at B 16 and behind at B 1
(docs/kernels-attention.md).
"""

from __future__ import annotations

import dataclasses
import math
import os
from dataclasses import dataclass
from functools import cache
from typing import Any

from ksearch.kernels.cuda_headers import MMA_SYNC_HEADER, WGMMA_HEADER
from ksearch.kernels.kernel_text import cuda_kernel
from ksearch.kernels.tensor_map import TMA_HEADER, encode

CLUSTER_HEADER = r"""
#ifndef KS_CLUSTER_HEADER
#define KS_CLUSTER_HEADER
// Every thread of every block of the cluster; release/acquire: shared-memory writes before it are seen after it.
__device__ __forceinline__ void ks_cluster_sync() {
  asm volatile("barrier.cluster.arrive.release.aligned;\nbarrier.cluster.wait.acquire.aligned;\n" ::: "memory");
}
// A float in the shared memory of block `rank` of this cluster, at the address p has in this block.
__device__ __forceinline__ float ks_dsmem_ld(const float* p, unsigned rank) {
  unsigned remote; float v;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;\n" : "=r"(remote) : "r"(ks_saddr(p)), "r"(rank));
  asm volatile("ld.shared::cluster.f32 %0, [%1];\n" : "=f"(v) : "r"(remote) : "memory");
  return v;
}
#endif
"""

# Template constants: T, D (64 | 128), G (query heads per kv head, <= 16), NC (consumer warps), PW (producer warps),
# BK (keys per tile, multiple of 16), SPW (slots per consumer warp), CS (splits = cluster size, as in the header's
# __cluster_dims__).
BODY = r"""
    constexpr int NS = NC * SPW;             // slots; tile i goes to warp i % NC, slot warp * SPW + (i / NC) % SPW
    constexpr int SLOT = 2 * BK * D;         // K rows, then V rows; 16-byte chunks swizzled by row (ks_sw)
    constexpr int NT = (NC + PW) * 32, CPR = D / 8;
    extern __shared__ __align__(128) unsigned char ks_smem[];
    unsigned long long* full = reinterpret_cast<unsigned long long*>(ks_smem);
    unsigned long long* empty = full + NS;
    // Tensor copies with the 128-byte swizzle (TMA) land in 1024-byte aligned tiles: the slots start at the first
    // 1024-byte boundary of the shared window past the barriers and the two maps' staging copies.
    const unsigned ks_base = ks_saddr(ks_smem), ks_head = 128 * ((16 * NS + 127) / 128) + (TMA ? 256 : 0);
    T* slots = reinterpret_cast<T*>(ks_smem + (TMA ? ((ks_base + ks_head + 1023) & ~1023u) - ks_base : ks_head));
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int gq = lane >> 2, tq = lane & 3;
    const int bh = blockIdx.x, split = blockIdx.y;  // with a cluster, split == rank: cluster dims (1, CS, 1)
    const int Hkv = k_shape[1], len = k_shape[2];  // k / v are views cache[:, :, :length]: the shape is the length
    const int b = bh / Hkv, hk = bh % Hkv;
    // 16-byte copies need 16-byte aligned rows: a layout we cannot copy gives NaN, never a silently wrong number.
    bool layout_ok = k_strides[3] == 1 && v_strides[3] == 1 && q_strides[3] == 1
        && ((k_strides[0] | k_strides[1] | k_strides[2] | v_strides[0] | v_strides[1] | v_strides[2]) & 7) == 0
        && ((q_strides[0] | q_strides[1]) & 1) == 0 && (reinterpret_cast<unsigned long long>(q) & 3) == 0
        && ((reinterpret_cast<unsigned long long>(k) | reinterpret_cast<unsigned long long>(v)) & 15) == 0;
    const int all_tiles = (len + BK - 1) / BK, per = (all_tiles + gridDim.y - 1) / gridDim.y;
    const int t0 = split * per;
    int ntiles = layout_ok ? max(0, min(all_tiles, t0 + per) - t0) : 0;
    const T* kb = k + b * k_strides[0] + hk * k_strides[1];
    const T* vb = v + b * v_strides[0] + hk * v_strides[1];
    // Element (row r, 16-byte column c) of a K or V tile: rows of D swizzled by ks_sw, or (TMA) the tensor copy's
    // layout, one region of BK rows x 128 bytes per 64 columns, each 16-byte chunk XORed with the row's low 3 bits.
    auto sw = [](int r, int c) {
      return TMA ? (c >> 3) * BK * 64 + r * 64 + (((c & 7) ^ (r & 7)) << 3) : ks_sw<D>(r, c);
    };

    if ((PW > 0 || TMA) && threadIdx.x == 0) {
      for (int s = 0; s < NS; ++s) { ks_mbar_init(full + s, PW > 0 ? 32 * PW : 1); ks_mbar_init(empty + s, 1); }
      asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    }
/*TMA_SETUP*/
    __syncthreads();

    float m[2] = {-1e30f, -1e30f}, l[2] = {0.f, 0.f};  // finite floor: no inf - inf before the first key
    float oacc[D / 8][4];
    #pragma unroll
    for (int n = 0; n < D / 8; ++n) oacc[n][0] = oacc[n][1] = oacc[n][2] = oacc[n][3] = 0.f;

    if (warp >= NC) {
      // Producers: tiles in order; a slot is refilled once its warp has released it. Each lane's arrival on "full"
      // fires when its own copies have landed, so the slot is full once every producer lane's have.
      const int pt = threadIdx.x - NC * 32;
      for (int i = 0; i < ntiles; ++i) {
        const int s = (i % NC) * SPW + (i / NC) % SPW, n = i / NS;
        if (n > 0) ks_mbar_wait(empty + s, (n - 1) & 1);
        const int j0 = (t0 + i) * BK, rows = min(BK, len - j0);
        T* ks = slots + s * SLOT;
        for (int e = pt; e < rows * CPR; e += 32 * PW) {
          const int r = e / CPR, c = e % CPR;
          ks_cp16(ks + sw(r, c), kb + (size_t)(j0 + r) * k_strides[2] + c * 8);
          ks_cp16(ks + BK * D + sw(r, c), vb + (size_t)(j0 + r) * v_strides[2] + c * 8);
        }
        ks_cp_mbar_arrive(full + s);
      }
    } else {
      // Without producer warps (PW == 0) each consumer warp copies its own tiles into its own SPW slots, SPW - 1 of
      // its tiles ahead: rows past the end zero-filled by the copy itself (source size 0), each lane's copies waited
      // for by cp.async.wait_group and made visible to the warp's ldmatrix by __syncwarp; no mbarrier, no producer
      // handshake. Every call commits a group, empty or not, so that wait_group's count stays one a tile.
      auto issue = [&](int i) {
        if (TMA && i < ntiles && lane == 0) {
          // One tensor copy per 64 columns of K and of V, completing on the slot's barrier by bytes; rows past the
          // cache's capacity arrive as zeros, rows between the length and the capacity as they are (see below).
          const int s = warp * SPW + (i / NC) % SPW, j0 = (t0 + i) * BK, bhk = b * Hkv + hk;
          T* ks = slots + s * SLOT;
          ks_mbar_expect(full + s, 2 * BK * D * (int)sizeof(T));
          #pragma unroll
          for (int h = 0; h < D / 64; ++h) {
            ks_tma_load3(ks_saddr(ks + h * BK * 64), gmap, 64 * h, j0, bhk, full + s);
            ks_tma_load3(ks_saddr(ks + BK * D + h * BK * 64), gmap + 16, 64 * h, j0, bhk, full + s);
          }
          return;
        }
        if (PW == 0 && !TMA && i < ntiles) {
          T* ks = slots + (warp * SPW + (i / NC) % SPW) * SLOT;
          const int j0 = (t0 + i) * BK;
          #pragma unroll 4
          for (int e = lane; e < BK * CPR; e += 32) {
            const int r = e / CPR, c = e % CPR, n = j0 + r < len ? 16 : 0, j = n ? j0 + r : j0;
            asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" :: "r"(ks_saddr(ks + sw(r, c))),
                         "l"(kb + (size_t)j * k_strides[2] + c * 8), "r"(n));
            asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::
                         "r"(ks_saddr(ks + BK * D + sw(r, c))), "l"(vb + (size_t)j * v_strides[2] + c * 8),
                         "r"(n));
          }
        }
        if (!TMA) ks_commit();
      };
      if (PW == 0) {
        #pragma unroll
        for (int r = 0; r < SPW - 1; ++r) issue(warp + r * NC);
      }
      // Q fragments (A operand, rows = the G query heads of this kv head, zero beyond G), kept for the whole loop.
      unsigned qa[D / 16][4];
      const T* qb = q + b * q_strides[0] + (size_t)hk * G * q_strides[1];
      #pragma unroll
      for (int kk = 0; kk < D / 16; ++kk) {
        #pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int row = gq + 8 * (e & 1), col = kk * 16 + 2 * tq + 8 * (e >> 1);
          qa[kk][e] = layout_ok && row < G ? *reinterpret_cast<const unsigned*>(qb + row * q_strides[1] + col) : 0u;
        }
      }
      const float sl2 = 1.4426950408889634f * rsqrtf((float)D);  // exp2 domain
      for (int i = warp; i < ntiles; i += NC) {
        const int s = warp * SPW + (i / NC) % SPW;
        if (PW == 0) {
          issue(i + (SPW - 1) * NC);  // into the slot the previous tile used: its reads ended at the __syncwarp
          if (TMA) {
            ks_mbar_wait(full + s, ((i / NC) / SPW) & 1);
          } else {
            ks_wait<SPW - 1>();
            __syncwarp();
          }
        } else {
          ks_mbar_wait(full + s, (i / NS) & 1);
        }
        T* ks = slots + s * SLOT;
        T* vs = ks + BK * D;
        const int rows = min(BK, len - (t0 + i) * BK);
        if ((PW > 0 || TMA) && rows < BK) {
          // Only the last tile of the sequence is partial: rows past it hold stale or uninitialised bits, and
          // 0 * NaN in P V would poison the sum, so zero them (nothing refills this slot afterwards).
          for (int e = lane; e < (BK - rows) * (D / 8); e += 32)
            *reinterpret_cast<uint4*>(vs + sw(rows + e / CPR, e % CPR)) = make_uint4(0, 0, 0, 0);
          __syncwarp();
        }
        float sacc[BK / 8][4];
        #pragma unroll
        for (int nt = 0; nt < BK / 8; ++nt) {
          sacc[nt][0] = sacc[nt][1] = sacc[nt][2] = sacc[nt][3] = 0.f;
          #pragma unroll
          for (int kk = 0; kk < D / 16; kk += 2) {
            unsigned r4[4];
            ks_ldsm4(r4, ks + sw(nt * 8 + (lane & 7), kk * 2 + (lane >> 3)));
            KsMma<T>::mma(sacc[nt], qa[kk], r4[0], r4[1]);
            KsMma<T>::mma(sacc[nt], qa[kk + 1], r4[2], r4[3]);
          }
        }
        float mx0 = m[0], mx1 = m[1];
        #pragma unroll
        for (int nt = 0; nt < BK / 8; ++nt) {
          #pragma unroll
          for (int e = 0; e < 4; ++e) {
            // A select, not arithmetic: keys past the end may be NaN garbage.
            sacc[nt][e] = nt * 8 + 2 * tq + (e & 1) < rows ? sacc[nt][e] * sl2 : -INFINITY;
          }
          mx0 = fmaxf(mx0, fmaxf(sacc[nt][0], sacc[nt][1]));
          mx1 = fmaxf(mx1, fmaxf(sacc[nt][2], sacc[nt][3]));
        }
        mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, 1));
        mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, 2));
        mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, 1));
        mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, 2));
        const float c0 = exp2f(m[0] - mx0), c1 = exp2f(m[1] - mx1);
        m[0] = mx0; m[1] = mx1; l[0] *= c0; l[1] *= c1;
        #pragma unroll
        for (int n = 0; n < D / 8; ++n) { oacc[n][0] *= c0; oacc[n][1] *= c0; oacc[n][2] *= c1; oacc[n][3] *= c1; }
        #pragma unroll
        for (int kt = 0; kt < BK / 16; ++kt) {
          unsigned pa[4];
          #pragma unroll
          for (int h = 0; h < 2; ++h) {
            float* sv = sacc[2 * kt + h];
            const float p0 = exp2f(sv[0] - mx0), p1 = exp2f(sv[1] - mx0), p2 = exp2f(sv[2] - mx1), p3 = exp2f(sv[3] - mx1);
            l[0] += p0 + p1; l[1] += p2 + p3;
            pa[2 * h] = KsMma<T>::pack(p0, p1);
            pa[2 * h + 1] = KsMma<T>::pack(p2, p3);
          }
          #pragma unroll
          for (int dn = 0; dn < D / 8; dn += 2) {
            unsigned r4[4];
            ks_ldsm4t(r4, vs + sw(kt * 16 + (lane & 7) + ((lane >> 3) & 1) * 8, dn + (lane >> 4)));
            KsMma<T>::mma(oacc[dn], pa, r4[0], r4[1]);
            KsMma<T>::mma(oacc[dn + 1], pa, r4[2], r4[3]);
          }
        }
        __syncwarp();
        if (PW > 0 && lane == 0) ks_mbar_arrive(empty + s);  // release: this warp's ldmatrix reads come before the refill
      }
      asm volatile("cp.async.wait_all;\n" ::: "memory");  // (PW == 0) nothing may land in the merge area below
      #pragma unroll
      for (int r = 0; r < 2; ++r) {
        l[r] += __shfl_xor_sync(0xffffffffu, l[r], 1);
        l[r] += __shfl_xor_sync(0xffffffffu, l[r], 2);
      }
    }
    // Every tile has been waited for by its warp, so every copy has landed: the slots become the merge area.
    __syncthreads();
    float* wm = reinterpret_cast<float*>(slots);   // [NC][G] per-warp max, then sums, then acc [NC][G][D]
    float* wl = wm + NC * G;
    float* wacc = wl + NC * G;
    float* bm = wacc + NC * G * D;                 // this block's merged partial: max [G], sum [G], acc [G][D]
    float* bl = bm + G;
    float* bacc = bl + G;
    if (warp < NC) {
      #pragma unroll
      for (int r = 0; r < 2; ++r) {
        const int g = gq + 8 * r;
        if (g < G) {
          if (tq == 0) { wm[warp * G + g] = m[r]; wl[warp * G + g] = l[r]; }
          #pragma unroll
          for (int n = 0; n < D / 8; ++n) {
            wacc[(warp * G + g) * D + n * 8 + 2 * tq] = oacc[n][2 * r];
            wacc[(warp * G + g) * D + n * 8 + 2 * tq + 1] = oacc[n][2 * r + 1];
          }
        }
      }
    }
    __syncthreads();
"""

# Both endings open a loop over this block's G x D outputs with the warps' partials merged into (mn, ls, as).
WARPS_MERGED = r"""
    for (int e = threadIdx.x; e < G * D; e += NT) {
      const int g = e / D, d = e % D;
      float mn = -1e30f;
      #pragma unroll
      for (int w = 0; w < NC; ++w) mn = fmaxf(mn, wm[w * G + g]);
      float ls = 0.f, as = 0.f;
      #pragma unroll
      for (int w = 0; w < NC; ++w) {
        const float c = exp2f(wm[w * G + g] - mn);
        ls += wl[w * G + g] * c;
        as += wacc[(w * G + g) * D + d] * c;
      }
"""

# The ending of the one-launch kernel: the warps' partials merged, then (CS > 1) the cluster's through DSMEM.
CLUSTER_TAIL = r"""
    T* ob = o + ((size_t)b * Hkv + hk) * G * D;  // o is (B, Hq, 1, D), row-contiguous: heads hk * G .. + G - 1""" + \
    WARPS_MERGED + r"""      if (CS == 1) {
        ob[e] = layout_ok ? (T)(as / ls) : (T)__int_as_float(0x7fc00000);
      } else {
        bacc[e] = as;
        if (d == 0) { bm[g] = mn; bl[g] = ls; }
      }
    }
    if (CS > 1) {
      // The splits' partials meet through distributed shared memory; each rank writes its slice of the output,
      // and no block leaves before the others have read its partial.
      ks_cluster_sync();
      const int slice = (G * D + CS - 1) / CS;
      for (int e = split * slice + threadIdx.x; e < min(G * D, (split + 1) * slice); e += NT) {
        const int g = e / D;
        float mn = -1e30f;
        for (int r = 0; r < CS; ++r) mn = fmaxf(mn, ks_dsmem_ld(bm + g, r));
        float ls = 0.f, as = 0.f;
        for (int r = 0; r < CS; ++r) {
          const float c = exp2f(ks_dsmem_ld(bm + g, r) - mn);
          ls += ks_dsmem_ld(bl + g, r) * c;
          as += ks_dsmem_ld(bacc + e, r) * c;
        }
        ob[e] = layout_ok ? (T)(as / ls) : (T)__int_as_float(0x7fc00000);
      }
      ks_cluster_sync();
    }
"""

# The ending of the graph-safe variant (no cluster dims; any number of splits): each block writes its split's
# un-normalised partial in cuda_split_k's layout, part_acc[bh][split][g][d] and part_ml[bh][split][g][2], for that
# module's merge kernel.
PARTS_TAIL = r"""
    const int nsplit = gridDim.y;""" + WARPS_MERGED + r"""      const size_t row = ((size_t)bh * nsplit + split) * G + g;
      part_acc[row * D + d] = layout_ok ? as : __int_as_float(0x7fc00000);
      if (d == 0) { part_ml[row * 2] = mn; part_ml[row * 2 + 1] = ls; }
    }
"""
# The tensor-copy variant's set-up (TMA, with no producer warps; the graph-safe kernel only): warp 0 copies the host's
# map (input tmap: 16 words, then the cache's capacity) twice into shared memory, sets K's and V's global addresses,
# publishes both to this block's 256 bytes of the scratch output `maps`; each warp's copying lane acquires them before
# its first copy. The map describes a (B x Hkv, capacity, D) cache, so a K or V view of another layout reads nothing
# (layout_ok: NaN, never a wrong number).
TMA_SETUP = r"""
    unsigned long long* smap = reinterpret_cast<unsigned long long*>(ks_smem + 128 * ((16 * NS + 127) / 128));
    const unsigned long long* gmap = reinterpret_cast<unsigned long long*>(
        (reinterpret_cast<size_t>(maps) + 127) & ~(size_t)127) + ((size_t)blockIdx.y * gridDim.x + blockIdx.x) * 32;
    {
      const long long cap = (long long)tmap[16];
      const bool tma_layout = k_strides[2] == D && v_strides[2] == D && k_strides[1] == cap * D
          && v_strides[1] == cap * D && k_strides[0] == Hkv * cap * D && v_strides[0] == Hkv * cap * D;
      if (!tma_layout) ntiles = 0;
      if (!tma_layout) layout_ok = false;
    }
    if (warp == 0) {
      if (lane < 16) { smap[lane] = tmap[lane]; smap[16 + lane] = tmap[lane]; }
      __syncwarp();
      if (lane == 0) { ks_tmap_address(smap, k); ks_tmap_address(smap + 16, v); }
      __syncwarp();
      ks_tmap_publish(const_cast<unsigned long long*>(gmap), smap);
      ks_tmap_publish(const_cast<unsigned long long*>(gmap) + 16, smap + 16);
    }
    __syncthreads();
    if (lane == 0) { ks_tmap_acquire(gmap); ks_tmap_acquire(gmap + 16); }
"""
SOURCE = BODY.replace("/*TMA_SETUP*/", "    const unsigned long long* gmap = nullptr;") + CLUSTER_TAIL
PARTS_SOURCE = BODY.replace("/*TMA_SETUP*/", "    const unsigned long long* gmap = nullptr;") + PARTS_TAIL
PARTS_TMA_SOURCE = BODY.replace("/*TMA_SETUP*/", TMA_SETUP) + PARTS_TAIL


@dataclass(frozen=True)
class ClusterConfig:
    # Consumer warps (NC). On the H200, 2 was the only configuration above native with CUDA graphs on (1.09x); with
    # them off it measured 1.22x, 4 consumers with 2 producers 1.26x (ahead at B 1-8, behind at B 16 and D 64).
    consumers: int = 2
    producers: int = 1     # warps that issue the copies (PW); 0: each consumer warp copies its own tiles ahead
    keys: int = 32         # keys per tile (BK), a multiple of 16
    slots: int = 2         # tiles in flight per consumer warp (SPW)
    max_cluster: int = 8   # most splits of one (batch, kv head): a cluster of at most 8 blocks is portable
    sms: int = 132         # H200 / H100 SXM; the split count aims at one wave over them
    # False: no cluster dims (safe under MLX's CUDA graphs): as many splits as one wave holds, each writing its
    # partial to global memory, merged by cuda_split_k's merge kernel (a second launch).
    cluster: bool = True
    # With producers=0 and cluster=False: the tiles come by tensor copies (TMA, 128-byte swizzle) through a map the
    # host encodes once per cache shape (kernels/tensor_map.py), one copy per 64 columns of K and of V, instead of
    # 16-byte cp.async a lane. Caches laid out (B, Hkv, capacity, D), row-contiguous; others read nothing (NaN).
    tma: bool = False

    def threads(self) -> int:
        return 32 * (self.consumers + self.producers)

    @classmethod
    def parse(cls, text: str) -> ClusterConfig:
        """`consumers=4,producers=2,cluster=0` -> ClusterConfig (fields not named keep their defaults)."""
        from ksearch.kernels.decode.cuda_split_k import parse_fields

        return cls(**parse_fields(cls, text))

    @classmethod
    def parse_mma_split(cls, text: str) -> ClusterConfig:
        """`consumers=4,producers=2` -> the graph-safe variant's configuration (cluster=False whatever the text says)."""
        return dataclasses.replace(cls.parse(text), cluster=False)

    def smem_bytes(self, d: int, g: int) -> int:
        slots = self.consumers * self.slots * 2 * self.keys * d * 2
        merge = 4 * (self.consumers * g * (d + 2) + g * (d + 2))
        maps = 256 + 1024 if self.tma else 0  # two maps' staging copies, and the slots aligned to 1024 bytes
        return 128 * math.ceil(16 * self.consumers * self.slots / 128) + maps + max(slots, merge)

    def blocks_per_sm(self, d: int, g: int) -> int:
        # Registers a thread, rounded up from ptxas's counts (122-184 at 32 keys a tile, 178-218 at 64): too few
        # blocks a wave costs a little parallelism, too many a second wave.
        regs = 232 if self.keys >= 64 else 192
        return max(1, min(228 * 1024 // (self.smem_bytes(d, g) + 1024), 65536 // (self.threads() * regs)))


def config_problem(cfg: ClusterConfig) -> str | None:
    """Why a configuration can never run, in words (None when it can)."""
    if cfg.keys % 16 or not 16 <= cfg.keys <= 128:
        return f"keys={cfg.keys}: use a multiple of 16 from 16 to 128"
    if not 1 <= cfg.consumers <= 8 or not 0 <= cfg.producers <= 4 or not 1 <= cfg.slots <= 4:
        return "consumers 1-8, producers 0-4 (0: each consumer copies its own tiles) and slots 1-4 a warp"
    if cfg.max_cluster not in (1, 2, 4, 8):
        return f"max_cluster={cfg.max_cluster}: use 1, 2, 4 or 8 (a portable cluster has at most 8 blocks)"
    if cfg.tma and (cfg.producers or cfg.cluster):
        return "tma=1 takes producers=0 and the kernel without clusters (cluster=0, or the mma: form)"
    if cfg.smem_bytes(128, 16) > 227 * 1024:
        return f"{cfg.smem_bytes(128, 16)} bytes of shared memory at D=128: fewer consumers, keys or slots"
    return None


def graphs_off() -> bool:
    """Whether MLX's CUDA graphs are off for this process (MLX reads MLX_USE_CUDA_GRAPHS when it starts)."""
    return os.environ.get("MLX_USE_CUDA_GRAPHS", "").strip() == "0"


GRAPHS_ERROR = ("the cluster decode kernel needs MLX_USE_CUDA_GRAPHS=0 set before MLX starts: under MLX 0.32's CUDA "
                "graphs, once a cluster kernel has run, later custom kernels silently do not run; set it, or use the "
                "default split-K kernel (no `config=`, or --kernel split_k)")


def supports(q: Any, k_cache: Any, length: int, cfg: ClusterConfig | None = None) -> bool:
    import mlx.core as mx

    if q.dtype not in (mx.float16, mx.bfloat16) or k_cache.dtype != q.dtype:
        return False
    b, hq, t, d = q.shape
    hkv = k_cache.shape[1]
    return (t == 1 and d in (64, 128) and hq % hkv == 0 and hq // hkv <= 16 and 0 < length <= k_cache.shape[2]
            and config_problem(cfg or ClusterConfig()) is None)


def cluster_size(bh: int, length: int, d: int, g: int, cfg: ClusterConfig) -> int:
    """Splits per (batch, kv head): the most (a power of two up to max_cluster) that keep every block in one wave
    and give each split at least two tiles."""
    room = cfg.sms * cfg.blocks_per_sm(d, g)
    cs = 1
    while cs * 2 <= cfg.max_cluster and bh * cs * 2 <= room and math.ceil(length / cfg.keys) >= 4 * cs:
        cs *= 2
    return cs


def wave_splits(bh: int, length: int, d: int, g: int, cfg: ClusterConfig) -> int:
    """Splits per (batch, kv head) without a cluster: as many as keep every block in one wave, at least two tiles
    each (one split where the (batch, kv head) pairs alone fill a wave)."""
    room = cfg.sms * cfg.blocks_per_sm(d, g)
    return max(1, min(room // max(1, bh), math.ceil(length / cfg.keys) // 2))


def header(cfg: ClusterConfig, cs: int) -> str:
    """MLX writes the `__global__` line, so launch bounds and the cluster shape ride on a redefinition of it."""
    cluster = f" __cluster_dims__(1, {cs}, 1)" if cs > 1 else ""
    # TMA_HEADER in every variant: the body names its helpers in branches that only the tensor-copy variant takes.
    return (MMA_SYNC_HEADER + WGMMA_HEADER + TMA_HEADER + CLUSTER_HEADER
            + "\n#undef __global__\n#define __global__ __attribute__((global)) "
            f"__attribute__((launch_bounds({cfg.threads()}, 1))){cluster}\n")


@cache
def _kernel(cfg: ClusterConfig, cs: int, smem: int) -> Any:
    # The name says every header-level choice (launch bounds, cluster shape) and the shared-memory size, for
    # profiles; what keeps kernels apart is the digest `cuda_kernel` adds (text and shared memory).
    name = f"ks_decode_cluster_w{cfg.consumers}_p{cfg.producers}_k{cfg.keys}_s{cfg.slots}_c{cs}_m{smem}"
    return cuda_kernel(name=name, input_names=["q", "k", "v"], output_names=["o"], source=SOURCE,
                       header=header(cfg, cs), ensure_row_contiguous=False, shared_memory=smem)


@cache
def _parts_kernel(cfg: ClusterConfig, smem: int) -> Any:
    name = f"ks_decode_mma_split_w{cfg.consumers}_p{cfg.producers}_k{cfg.keys}_s{cfg.slots}_m{smem}" \
        + ("_tma" if cfg.tma else "")
    if cfg.tma:
        return cuda_kernel(name=name, input_names=["q", "k", "v", "tmap"],
                           output_names=["part_acc", "part_ml", "maps"], source=PARTS_TMA_SOURCE,
                           header=header(cfg, 1), ensure_row_contiguous=False, shared_memory=smem)
    return cuda_kernel(name=name, input_names=["q", "k", "v"], output_names=["part_acc", "part_ml"],
                       source=PARTS_SOURCE, header=header(cfg, 1), ensure_row_contiguous=False,
                       shared_memory=smem)


@cache
def tma_map(d: int, capacity: int, rows: int, keys: int) -> Any:
    """The tensor map over a (rows = B x Hkv, capacity, D) cache of 2-byte elements, boxes of 64 columns x `keys`
    rows with the 128-byte swizzle, then the capacity (the kernel checks its views against it): 18 uint64, made once
    per cache shape."""
    import mlx.core as mx
    import numpy as np

    words = np.frombuffer(encode((d, capacity, rows), (d * 2, capacity * d * 2), (64, keys, 1), swizzle=3),
                          dtype=np.uint64)
    arr = mx.array(np.concatenate([words, np.array([capacity, 0], dtype=np.uint64)]))
    mx.eval(arr)
    return arr


def template(dtype: Any, d: int, g: int, cfg: ClusterConfig, cs: int) -> list[tuple[str, Any]]:
    return [("T", dtype), ("D", d), ("G", g), ("NC", cfg.consumers), ("PW", cfg.producers), ("BK", cfg.keys),
            ("SPW", cfg.slots), ("CS", cs), ("TMA", cfg.tma)]


def decode_cluster(q: Any, k_cache: Any, v_cache: Any, length: int, cfg: ClusterConfig | None = None) -> Any:
    cfg = cfg or ClusterConfig()
    if not cfg.cluster:
        return _decode_parts(q, k_cache, v_cache, length, cfg)
    if not graphs_off():
        raise ValueError(GRAPHS_ERROR)
    b, hq, _, d = q.shape
    hkv = k_cache.shape[1]
    g = hq // hkv
    cs = cluster_size(b * hkv, length, d, g, cfg)
    nt = cfg.threads()
    kern = _kernel(cfg, cs, cfg.smem_bytes(d, g))
    # Views, not copies: the kernel reads strides, and the K view's shape tells it the length.
    return kern(inputs=[q, k_cache[:, :, :length], v_cache[:, :, :length]], template=template(q.dtype, d, g, cfg, cs),
                grid=(b * hkv * nt, cs, 1), threadgroup=(nt, 1, 1), output_shapes=[q.shape],
                output_dtypes=[q.dtype])[0]


def _decode_parts(q: Any, k_cache: Any, v_cache: Any, length: int, cfg: ClusterConfig) -> Any:
    """The graph-safe variant: one launch of BODY + PARTS_TAIL over (batch x kv head, splits), then the merge."""
    import mlx.core as mx

    from ksearch.kernels.decode import cuda_split_k

    b, hq, _, d = q.shape
    hkv = k_cache.shape[1]
    g = hq // hkv
    ns = wave_splits(b * hkv, length, d, g, cfg)
    nt = cfg.threads()
    inputs = [q, k_cache[:, :, :length], v_cache[:, :, :length]]
    shapes: list[tuple[int, ...]] = [(b * hkv, ns, g, d), (b * hkv, ns, g, 2)]
    dtypes = [mx.float32, mx.float32]
    if cfg.tma:
        inputs.append(tma_map(d, k_cache.shape[2], b * hkv, cfg.keys))
        shapes.append((b * hkv * ns * 32 + 16,))  # 256 bytes of published maps a block, room to align to 128
        dtypes.append(mx.uint64)
    part_acc, part_ml = _parts_kernel(cfg, cfg.smem_bytes(d, g))(
        inputs=inputs, template=template(q.dtype, d, g, cfg, 0), grid=(b * hkv * nt, ns, 1), threadgroup=(nt, 1, 1),
        output_shapes=shapes, output_dtypes=dtypes)[:2]
    return cuda_split_k.merge_partials(part_acc, part_ml, q)
