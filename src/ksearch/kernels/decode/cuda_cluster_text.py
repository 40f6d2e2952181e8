"""The CUDA text of the tensor-core decode kernels (cuda_cluster.py launches them): the body shared by the one-launch
cluster kernel (SOURCE) and the graph-safe kernel without clusters (PARTS_SOURCE), and that kernel fed by tensor
copies through a host-encoded map (PARTS_TMA_SOURCE). Kept apart from the launch code, as cuda_split_k_text.py is
from cuda_split_k.py; the compile tests embed the same text.
"""

from __future__ import annotations

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
_BODY_CP_ASYNC = BODY.replace("/*TMA_SETUP*/", "    const unsigned long long* gmap = nullptr;")
SOURCE = _BODY_CP_ASYNC + CLUSTER_TAIL
PARTS_SOURCE = _BODY_CP_ASYNC + PARTS_TAIL
PARTS_TMA_SOURCE = BODY.replace("/*TMA_SETUP*/", TMA_SETUP) + PARTS_TAIL
