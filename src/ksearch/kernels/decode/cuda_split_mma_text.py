"""The CUDA text of the split-K decode kernel with its products on tensor cores (`DecodeConfig(tensor_cores=True)`):
the split-K kernel's grid, splits, per-lane copy ring and block merge, with S = Q K^T and P V as `mma.sync` m16n8k16
instead of fp32 FMAs, shuffles and conversions for every key row (the kernel at the board's power limit at B 16:
docs/kernels-attention.md).

The fragments come straight from each lane's own 16-byte rows, so there is no `ldmatrix`, no swizzle and no barrier:
- Rows of the A operand are the G <= 8 query heads (rows 8-15 zero); columns of S are keys. Lane (gq = lane / 4,
  tq = lane % 4) copies K[key gq (+8)][32 p + 8 tq, +8): the contraction's order over d is permuted (the same way for
  Q, whose fragments are made from Q[gq][32 p + 8 tq, +8]), so one 16-byte row gives the B operand of two k-steps.
- For P V the keys are the contraction and P comes from S's accumulators as they are. The lane copies V's rows
  2 tq, 2 tq + 1, 2 tq + 8, 2 tq + 9 at its own columns (16-byte chunks gq and gq + 8), and `__byte_perm` pairs two
  rows' halves into a B operand; so output column n of n-tile j is d = 8 (n + 8 (j / 8)) + j % 8, undone when the
  warps' states go to shared memory.
Template constants: T, D (64 | 128), G (<= 8), NW (warps), U (16-key groups a warp a step), RING (steps in the ring).
The ring is dynamic shared memory: RING x NW x 32 lanes x U x D / 8 rows of 16 bytes.
"""

from __future__ import annotations

from ksearch.kernels.decode.cuda_split_k_text import BLOCK_MERGE

SOURCE = r"""
    constexpr int CH = D / 64;               // V chunks a lane holds a row (its columns: chunks gq + 8 c)
    constexpr int KR = D / 16;               // K rows a lane copies for 16 keys (2 n-tiles x D / 32)
    constexpr int PER = KR + 4 * CH;         // 16-byte rows a lane copies for 16 keys
    constexpr int NLD = U * PER;             // ... a step
    constexpr int STEP = NW * 16 * U;        // keys a block iteration
    constexpr int LANES = NW * 32;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int gq = lane >> 2, tq = lane & 3;
    const int bh = blockIdx.x;
    const int split = blockIdx.y, nsplit = gridDim.y;
    const int Hkv = k_shape[1], len = k_shape[2];
    const int hpb = q_shape[1] / G, grp = q_shape[1] / Hkv;
    const int b = bh / hpb, hb = bh % hpb, hk = hb * G / grp;
    const int chunk = ((len + nsplit - 1) / nsplit + STEP - 1) / STEP * STEP;
    const int start = split * chunk;
    // 16-byte copies need rows 16-byte aligned: a layout we cannot copy reads nothing and gives NaN (the merge below).
    const bool dense_rows = k_strides[3] == 1 && v_strides[3] == 1 && q_strides[3] == 1
        && ((k_strides[0] | k_strides[1] | k_strides[2] | v_strides[0] | v_strides[1] | v_strides[2]
             | q_strides[0] | q_strides[1]) & 7) == 0
        && ((reinterpret_cast<unsigned long long>(k) | reinterpret_cast<unsigned long long>(v)
             | reinterpret_cast<unsigned long long>(q)) & 15) == 0;
    const int end = dense_rows ? min(len, start + chunk) : start;
    const T* kb = k + b * k_strides[0] + hk * k_strides[1];
    const T* vb = v + b * v_strides[0] + hk * v_strides[1];
    const int64_t ksj = k_strides[2], vsj = v_strides[2];
    extern __shared__ __align__(16) uint4 ks_ring[];  // [RING][NLD][LANES]: each lane reads back only its own rows

    // The rows of the step whose warp keys start at `first`, into `slot`; past the end zero-filled (source size 0).
    auto issue = [&](int first, int slot) {
      uint4* dst = ks_ring + (size_t)slot * NLD * LANES + threadIdx.x;
      #pragma unroll
      for (int u = 0; u < U; ++u) {
        const int jb = first + u * 16;
        #pragma unroll
        for (int i = 0; i < PER; ++i) {
          int j;
          const T* src;
          if (i < KR) {
            const int nt = i / (D / 32), p = i % (D / 32);
            j = jb + 8 * nt + gq;
            src = kb + 32 * p + 8 * tq;
          } else {
            const int r = (i - KR) / CH, c = (i - KR) % CH;
            j = jb + 2 * tq + (r & 1) + 8 * (r >> 1);
            src = vb + 8 * (gq + 8 * c);
          }
          const int n = j < end ? 16 : 0;
          src += (int64_t)(n ? j : start) * (i < KR ? ksj : vsj);
          asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::
                       "r"((unsigned)__cvta_generic_to_shared(dst + (u * PER + i) * LANES)), "l"(src), "r"(n));
        }
      }
      asm volatile("cp.async.commit_group;\n" ::);
    };
    int j0 = start + warp * 16 * U;
    if (j0 < end) {
      #pragma unroll
      for (int r = 0; r < RING - 1; ++r) issue(j0 + r * STEP, r);
    }

    // Q: A fragments in the permuted d order (see the module's text); rows past G zero.
    uint4 qv[D / 32];
    #pragma unroll
    for (int p = 0; p < D / 32; ++p)
      qv[p] = dense_rows && gq < G
          ? *reinterpret_cast<const uint4*>(q + b * q_strides[0] + (hb * G + gq) * q_strides[1] + 32 * p + 8 * tq)
          : make_uint4(0, 0, 0, 0);
    const float qscale = 1.4426950408889634f * rsqrtf((float)D);  // scores in the exp2 domain
    float m = -1e30f, l = 0.f;  // finite floor: no inf - inf before the first key
    float oacc[D / 8][4];
    #pragma unroll
    for (int j = 0; j < D / 8; ++j) oacc[j][0] = oacc[j][1] = oacc[j][2] = oacc[j][3] = 0.f;

    for (int it = 0; j0 < end; j0 += STEP, ++it) {
      issue(j0 + (RING - 1) * STEP, (it + RING - 1) % RING);
      asm volatile("cp.async.wait_group %0;\n" :: "n"(RING - 1));
      const uint4* mine = ks_ring + (size_t)(it % RING) * NLD * LANES + threadIdx.x;
      #pragma unroll
      for (int u = 0; u < U; ++u) {
        const uint4* row = mine + u * PER * LANES;
        const int jb = j0 + u * 16;
        float sacc[2][4];
        #pragma unroll
        for (int nt = 0; nt < 2; ++nt) {
          sacc[nt][0] = sacc[nt][1] = sacc[nt][2] = sacc[nt][3] = 0.f;
          #pragma unroll
          for (int p = 0; p < D / 32; ++p) {
            const uint4 kr = row[(nt * (D / 32) + p) * LANES];
            const unsigned a0[4] = {qv[p].x, 0u, qv[p].y, 0u}, a1[4] = {qv[p].z, 0u, qv[p].w, 0u};
            KsMma<T>::mma(sacc[nt], a0, kr.x, kr.y);
            KsMma<T>::mma(sacc[nt], a1, kr.z, kr.w);
          }
        }
        // Lane (gq, tq) holds row gq's scores for keys 8 nt + 2 tq + e; a select, not arithmetic, past the end.
        float s[4];
        float mx = m;
        #pragma unroll
        for (int e = 0; e < 4; ++e) {
          s[e] = jb + 8 * (e >> 1) + 2 * tq + (e & 1) < end ? sacc[e >> 1][e & 1] * qscale : -INFINITY;
          mx = fmaxf(mx, s[e]);
        }
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
        const float corr = exp2f(m - mx);  // exactly 1 where the maximum did not grow
        if (__any_sync(0xffffffffu, mx != m)) {
          #pragma unroll
          for (int j = 0; j < D / 8; ++j) { oacc[j][0] *= corr; oacc[j][1] *= corr; }
        }
        l *= corr;
        m = mx;
        float pr[4];
        #pragma unroll
        for (int e = 0; e < 4; ++e) { pr[e] = exp2f(s[e] - mx); l += pr[e]; }
        const unsigned pa[4] = {KsMma<T>::pack(pr[0], pr[1]), 0u, KsMma<T>::pack(pr[2], pr[3]), 0u};
        #pragma unroll
        for (int c = 0; c < CH; ++c) {
          uint4 vr[4];
          #pragma unroll
          for (int r = 0; r < 4; ++r) vr[r] = row[(KR + r * CH + c) * LANES];
          const unsigned* w0 = reinterpret_cast<const unsigned*>(&vr[0]);
          const unsigned* w1 = reinterpret_cast<const unsigned*>(&vr[1]);
          const unsigned* w2 = reinterpret_cast<const unsigned*>(&vr[2]);
          const unsigned* w3 = reinterpret_cast<const unsigned*>(&vr[3]);
          #pragma unroll
          for (int e = 0; e < 8; ++e) {
            const unsigned sel = (e & 1) ? 0x7632u : 0x5410u;  // the high or the low halves of two rows' words
            KsMma<T>::mma(oacc[8 * c + e], pa, __byte_perm(w0[e >> 1], w1[e >> 1], sel),
                          __byte_perm(w2[e >> 1], w3[e >> 1], sel));
          }
        }
      }
    }
    asm volatile("cp.async.wait_all;\n" ::);
    l += __shfl_xor_sync(0xffffffffu, l, 1);
    l += __shfl_xor_sync(0xffffffffu, l, 2);
    __shared__ float sm_m[NW][G], sm_l[NW][G];
    __shared__ float sm_acc[NW][G][D];
    if (gq < G) {
      if (tq == 0) { sm_m[warp][gq] = m; sm_l[warp][gq] = l; }
      #pragma unroll
      for (int j = 0; j < D / 8; ++j) {
        sm_acc[warp][gq][8 * (2 * tq + 8 * (j / 8)) + j % 8] = oacc[j][0];
        sm_acc[warp][gq][8 * (2 * tq + 1 + 8 * (j / 8)) + j % 8] = oacc[j][1];
      }
    }
""" + BLOCK_MERGE
