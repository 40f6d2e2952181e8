"""Float32 prefill on tensor cores: each product of two fp32 values as three TF32 products (3xTF32).

A TF32 operand keeps 10 of fp32's 23 mantissa bits, so one TF32 product is off by about 5e-4 relative, five times
the 1e-4 a float32 reference allows (MLX's own float32 matmuls on CUDA run so). Here each operand x is split into
big (x's upper 19 bits, a TF32 value) and small = x - big (exact in fp32, of which the tensor core reads the upper 19
bits too), and a product a b is accumulated as a_small b_big + a_big b_small + a_big b_big: only a_small b_small and
the truncation of the small parts are lost, about 2^-20 of a b. Three `mma.sync` m16n8k8 TF32 products a pair of
fragments, in fp32 accumulators, FlashAttention-2 style: one block per BM query rows of one (batch, query head), 16
rows a warp; K / V tiles of BN keys stream through shared memory by 16-byte `cp.async`, double-buffered; the online
softmax in fp32 with the exp2 trick; causal tiles past the block's diagonal are never loaded.

Layout (PTX's m16n8k8 TF32 fragments; g = lane / 4, t = lane % 4): shared-memory rows padded so that the lanes of a
load hit different banks (TF32X3_HEADER). P goes from S's accumulators to the A operand of P V without shuffles: S's
lane holds keys 2t and 2t + 1 of a tile of 8, which the product's K index t and t + 4 are taken to be (a sum over
keys does not care about their order), and V's fragment reads those keys to match. SOURCE_FRAG, the second form, lays
Q, S's keys and V out so that each fragment is one 16-byte load into the registers the product reads; it is the
default (`default_config`), the first form a named option (`Tf32Config(frag=False)`). The index
arithmetic lives in `__host__ __device__` helpers, which tests run on the host against PTX's fragment layout
(tests/test_prefill_tf32x3.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from ksearch.kernels.attention.cuda_prefill import BLOCK_COORDS, launch, shape_launch

TF32X3_HEADER = r"""
#ifndef KS_TF32X3_HEADER
#define KS_TF32X3_HEADER
#ifndef __CUDACC__
#define __host__
#define __device__
#define __forceinline__ inline
struct float2 { float x, y; };
struct float4 { float x, y, z, w; };
#endif
// Shared-memory rows: Q's and K's D + 16 floats long (16-byte loads, the 8 lanes of a quarter-warp on 8 different
// groups of 4 banks), V's D + 4 (8-byte loads, a half-warp's 16 lanes on 16 different pairs of banks).
template <int D> __host__ __device__ __forceinline__ int ks3_qk(int row, int col) { return row * (D + 16) + col; }
template <int D> __host__ __device__ __forceinline__ int ks3_v(int row, int col) { return row * (D + 4) + col; }
// S = Q K^T over the 16 dims 16 kp .. 16 kp + 15 (two k-steps): a lane loads 4 of them, 4t .. 4t + 3, of its rows
// of Q (g, g + 8 of warp w's 16) and of key 8 n + g of K; k-step 2 kp + s takes the pair 4t + 2s, 4t + 2s + 1 as its
// K indices t and t + 4 (a sum over dims does not care about their order). A: a0 (g, t), a1 (g + 8, t), a2 (g, t + 4),
// a3 (g + 8, t + 4); B = K^T: b0 (k t, n g), b1 (k t + 4, n g).
template <int D> __host__ __device__ __forceinline__ int ks3_qa(int w, int lane, int kp, int half) {
  return ks3_qk<D>(w * 16 + (lane >> 2) + half * 8, kp * 16 + 4 * (lane & 3));
}
template <int D> __host__ __device__ __forceinline__ int ks3_kb(int lane, int n, int kp) {
  return ks3_qk<D>(n * 8 + (lane >> 2), kp * 16 + 4 * (lane & 3));
}
__host__ __device__ __forceinline__ void ks3_pick(float4 lo, float4 hi, int s, float* a) {  // A of k-step 2 kp + s
  a[0] = s ? lo.z : lo.x; a[1] = s ? hi.z : hi.x; a[2] = s ? lo.w : lo.y; a[3] = s ? hi.w : hi.y;
}
__host__ __device__ __forceinline__ void ks3_pick_b(float4 k, int s, float* b) {  // B of k-step 2 kp + s
  b[0] = s ? k.z : k.x; b[1] = s ? k.w : k.y;
}
// O += P V over keys 8 kk .. 8 kk + 7 and the 16 dims 16 j .. 16 j + 15 (two D tiles): P's A fragment is S's
// accumulators of key tile kk in the order (c0, c2, c1, c3), which makes the product's K index t key 2t and t + 4
// key 2t + 1; a lane loads keys 2t and 2t + 1 of V, dims 16 j + 2g and + 1: D tile 2 j + s's column g is dim
// 16 j + 2g + s, so a lane's accumulators of the two tiles are O's dims 16 j + 4t .. 16 j + 4t + 3 (ks3_out).
__host__ __device__ __forceinline__ int ks3_pa(int i) { return (i & 1) * 2 + (i >> 1); }
template <int D> __host__ __device__ __forceinline__ int ks3_vb(int lane, int kk, int j, int i) {
  return ks3_v<D>(kk * 8 + 2 * (lane & 3) + i, j * 16 + 2 * (lane >> 2));
}
// The four dims 16 j + 4t .. + 3 of row g (half 0) or g + 8 (half 1) from D tiles 2 j (e) and 2 j + 1 (f).
__host__ __device__ __forceinline__ float4 ks3_out(const float* e, const float* f, int half) {
  return float4{e[2 * half], f[2 * half], e[2 * half + 1], f[2 * half + 1]};
}
// Fragment layouts (FRAG): Q interleaved so that one 16-byte load is a lane's A fragment of a k-step, S's key tiles
// paired so that a lane's four keys of tiles 2j and 2j + 1 are 16 j + 4t .. + 3, and V transposed so that one
// 16-byte load is a lane's two B fragments of those tiles. Q[r][x] of the block sits in pair-row (r / 16) * 8 + r % 8
// (rows r and r + 8 of a warp side by side), each k-step's quads (a0, a1, a2, a3) in lane order, its dims those K's
// 16-byte loads give the k-step (ks3_pick_b): k-step 2 kp + s takes dims 16 kp + 4t + 2s (K index t) and + 1 (t + 4).
template <int D> __host__ __device__ __forceinline__ int ks3_qi(int prow, int slot) { return prow * (2 * D + 16) + slot; }
template <int D> __host__ __device__ __forceinline__ int ks3_qi_at(int r, int x) {
  const int kk = 2 * (x >> 4) + ((x >> 1) & 1), t = (x >> 2) & 3;
  return ks3_qi<D>((r >> 4) * 8 + (r & 7), (kk * 4 + t) * 4 + (x & 1) * 2 + ((r >> 3) & 1));
}
template <int D> __host__ __device__ __forceinline__ int ks3_qquad(int w, int lane, int kk) {
  return ks3_qi<D>(w * 8 + (lane >> 2), (kk * 4 + (lane & 3)) * 4);
}
// The key that column c of S's key tile n stands for, and the K row lane g of tile n loads as B's column g.
__host__ __device__ __forceinline__ int ks3_key(int n, int c) {
  return 16 * (n >> 1) + 4 * (c >> 1) + 2 * (n & 1) + (c & 1);
}
template <int D> __host__ __device__ __forceinline__ int ks3_kbf(int lane, int n, int kp) {
  return ks3_qk<D>(ks3_key(n, lane >> 2), kp * 16 + 4 * (lane & 3));
}
// V^T: dim d's row of BN keys, its 16-byte granules XOR-swizzled by d's parity (a quarter-warp's loads and a warp's
// stores on different banks, no padding); a lane's B pairs of key tiles 2j (x, y) and 2j + 1 (z, w), D tile dn.
template <int BN> __host__ __device__ __forceinline__ int ks3_vt(int d, int key) {
  return d * BN + (((key >> 2) ^ ((d & 1) << 2)) << 2) + (key & 3);
}
template <int BN> __host__ __device__ __forceinline__ int ks3_vtb(int lane, int j, int dn) {
  return ks3_vt<BN>(dn * 8 + (lane >> 2), 16 * j + 4 * (lane & 3));
}
#ifdef __CUDACC__
// x as big + small: big x's upper 19 bits (a TF32 value), small = x - big (exact in fp32), of which a TF32 product
// reads the upper 19 bits too, losing at most 2^-10 of small (about 2^-20 of x). Two instructions a value: a
// cvt.rna.tf32.f32 each took about five on sm_90a (NaN and overflow checks, the rounding, a select).
__device__ __forceinline__ void ks3_split(float x, unsigned& big, unsigned& small) {
  big = __float_as_uint(x) & 0xffffe000u;
  small = __float_as_uint(x - __uint_as_float(big));
}
__device__ __forceinline__ void ks3_mma(float* c, const unsigned* a, unsigned b0, unsigned b1) {
  asm("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
// c += a b as three TF32 products, the small ones first; a and b fp32, split here.
__device__ __forceinline__ void ks3_mma3(float* c, const unsigned* ab, const unsigned* as, const float* b) {
  unsigned bb[2], bs[2];
  ks3_split(b[0], bb[0], bs[0]);
  ks3_split(b[1], bb[1], bs[1]);
  ks3_mma(c, as, bb[0], bb[1]);
  ks3_mma(c, ab, bs[0], bs[1]);
  ks3_mma(c, ab, bb[0], bb[1]);
}
// rows x D floats from global (row stride D) into a tile of rows SR floats long; rows at or past `valid` read as zeros.
template <int D, int SR, int NT, typename G>
__device__ __forceinline__ void ks3_load(float* sm, const G* g, int rows, int valid) {
  constexpr int CPR = D / 4;
  for (int i = threadIdx.x; i < rows * CPR; i += NT) {
    const int r = i / CPR, c = i % CPR;
    const unsigned s = (unsigned)__cvta_generic_to_shared(sm + r * SR + c * 4);
    const int in = r < valid ? 16 : 0;
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n"
                 :: "r"(s), "l"(g + (size_t)(r < valid ? r : 0) * D + c * 4), "r"(in));
  }
}
#endif
#endif
"""

# The scale, the mask, the online softmax's running maxima and sums, O rescaled and S made P, between the two
# products of a tile; `key_in_tile`: the key, counted from the tile's first, that s[n][e] stands for.
_SOFTMAX = r"""      const int n0 = t * BN;
      // The mask: keys past S (zeros in the tile) and, causal, keys past a row's diagonal.
      const bool need_mask = n0 + BN > S || (CAUSAL && n0 + BN - 1 > m0 + warp * 16 + shift);
      float mx[2] = {mrow[0], mrow[1]};
      #pragma unroll
      for (int n = 0; n < BN / 8; ++n) {
        #pragma unroll
        for (int e = 0; e < 4; ++e) {
          float x = s[n][e] * sl2;
          if (need_mask) {
            const int key = n0 + KEY_IN_TILE;
            const int row = row_lo + ((e >> 1) << 3);
            if (key >= S || (CAUSAL && key > row + shift)) x = -INFINITY;
          }
          s[n][e] = x;
          mx[e >> 1] = fmaxf(mx[e >> 1], x);
        }
      }
      #pragma unroll
      for (int i = 0; i < 2; ++i) {
        mx[i] = fmaxf(mx[i], __shfl_xor_sync(0xffffffffu, mx[i], 1));
        mx[i] = fmaxf(mx[i], __shfl_xor_sync(0xffffffffu, mx[i], 2));
      }
      const float corr[2] = {exp2f(mrow[0] - mx[0]), exp2f(mrow[1] - mx[1])};
      mrow[0] = mx[0]; mrow[1] = mx[1];
      lrow[0] *= corr[0]; lrow[1] *= corr[1];
      #pragma unroll
      for (int n = 0; n < D / 8; ++n) {
        oacc[n][0] *= corr[0]; oacc[n][1] *= corr[0]; oacc[n][2] *= corr[1]; oacc[n][3] *= corr[1];
      }
      #pragma unroll
      for (int n = 0; n < BN / 8; ++n) {
        s[n][0] = exp2f(s[n][0] - mx[0]); s[n][1] = exp2f(s[n][1] - mx[0]);
        s[n][2] = exp2f(s[n][2] - mx[1]); s[n][3] = exp2f(s[n][3] - mx[1]);
        lrow[0] += s[n][0] + s[n][1]; lrow[1] += s[n][2] + s[n][3];
      }
"""


def _softmax(key_in_tile: str) -> str:
    return _SOFTMAX.replace("KEY_IN_TILE", key_in_tile)


# A lane's running state: Q's split A fragments (kept with QREG, else split again every tile), O's accumulators, the
# rows' maxima and sums; and at the end the sums over the lane's quad, inverted.
_STATE = r"""    constexpr int QF = QREG ? D / 8 : 1;  // Q's split A fragments kept (QREG), else split again every tile
    unsigned qb[QF][4], qsm[QF][4];
    float oacc[D / 8][4];
    #pragma unroll
    for (int n = 0; n < D / 8; ++n) { oacc[n][0] = oacc[n][1] = oacc[n][2] = oacc[n][3] = 0.f; }
    float mrow[2] = {-1e30f, -1e30f}, lrow[2] = {0.f, 0.f};
    const int row_lo = m0 + warp * 16 + g;  // this lane's rows: row_lo and row_lo + 8
"""
_ROW_SUMS = r"""    #pragma unroll
    for (int i = 0; i < 2; ++i) {
      lrow[i] += __shfl_xor_sync(0xffffffffu, lrow[i], 1);
      lrow[i] += __shfl_xor_sync(0xffffffffu, lrow[i], 2);
      lrow[i] = 1.f / lrow[i];
    }
"""


# Template constants: D (64 | 128), BM (16 * warps), BN (keys a tile, a multiple of 8), CAUSAL, QREG (Q's split
# fragments kept in registers for the whole block instead of split again every tile). T is float; the text compiles
# for any T (a checker may build it with a candidate's other dtype), and the callers launch it for float32 only.
SOURCE = r"""
    constexpr int NW = BM / 16, NT = NW * 32, SQ = D + 16, SV = D + 4;
    extern __shared__ __align__(128) float ks_smem[];
    float* Qs = ks_smem;
    float* Ks = Qs + BM * SQ;
    float* Vs = Ks + 2 * BN * SQ;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int g = lane >> 2, tq = lane & 3;
""" + BLOCK_COORDS + r"""
    ks3_load<D, SQ, NT>(Qs, qg, BM, L - m0);
    ks3_load<D, SQ, NT>(Ks, kg, BN, S);
    ks3_load<D, SV, NT>(Vs, vg, BN, S);
    asm volatile("cp.async.commit_group;\n" ::);

""" + _STATE + r"""
    for (int t = 0; t < ntiles; ++t) {
      const int st = t & 1;
      if (t + 1 < ntiles) {
        const int n1 = (t + 1) * BN;
        ks3_load<D, SQ, NT>(Ks + (st ^ 1) * BN * SQ, kg + (size_t)n1 * D, BN, S - n1);
        ks3_load<D, SV, NT>(Vs + (st ^ 1) * BN * SV, vg + (size_t)n1 * D, BN, S - n1);
        asm volatile("cp.async.commit_group;\n" ::);
        asm volatile("cp.async.wait_group 1;\n" ::);
      } else {
        asm volatile("cp.async.wait_group 0;\n" ::);
      }
      __syncthreads();
      const float* Kt = Ks + st * BN * SQ;
      const float* Vt = Vs + st * BN * SV;
      float s[BN / 8][4];
      #pragma unroll
      for (int n = 0; n < BN / 8; ++n) { s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0.f; }
      #pragma unroll
      for (int kp = 0; kp < D / 16; ++kp) {
        float4 qlo, qhi;
        if (!QREG || t == 0) {
          qlo = *reinterpret_cast<const float4*>(Qs + ks3_qa<D>(warp, lane, kp, 0));
          qhi = *reinterpret_cast<const float4*>(Qs + ks3_qa<D>(warp, lane, kp, 1));
        }
        #pragma unroll
        for (int sk = 0; sk < 2; ++sk) {
          const int f = QREG ? 2 * kp + sk : 0;
          if (!QREG || t == 0) {
            float a[4];
            ks3_pick(qlo, qhi, sk, a);
            #pragma unroll
            for (int i = 0; i < 4; ++i) ks3_split(a[i], qb[f][i], qsm[f][i]);
          }
          #pragma unroll
          for (int n = 0; n < BN / 8; ++n) {
            float b[2];
            ks3_pick_b(*reinterpret_cast<const float4*>(Kt + ks3_kb<D>(lane, n, kp)), sk, b);
            ks3_mma3(s[n], qb[f], qsm[f], b);
          }
        }
      }
""" + _softmax("n * 8 + 2 * tq + (e & 1)") + r"""      #pragma unroll
      for (int kk = 0; kk < BN / 8; ++kk) {
        unsigned pb[4], ps[4];
        #pragma unroll
        for (int i = 0; i < 4; ++i) ks3_split(s[kk][ks3_pa(i)], pb[i], ps[i]);
        #pragma unroll
        for (int j = 0; j < D / 16; ++j) {
          const float2 v0 = *reinterpret_cast<const float2*>(Vt + ks3_vb<D>(lane, kk, j, 0));
          const float2 v1 = *reinterpret_cast<const float2*>(Vt + ks3_vb<D>(lane, kk, j, 1));
          const float b0[2] = {v0.x, v1.x}, b1[2] = {v0.y, v1.y};
          ks3_mma3(oacc[2 * j], pb, ps, b0);
          ks3_mma3(oacc[2 * j + 1], pb, ps, b1);
        }
      }
      __syncthreads();  // the next tile's copy goes into the stage just read
    }
""" + _ROW_SUMS + r"""    #pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int row = row_lo + half * 8;
      if (row < L) {
        T* og = o + ((size_t)bhq * L + row) * D + 4 * tq;
        #pragma unroll
        for (int j = 0; j < D / 16; ++j) {
          float4 x = ks3_out(oacc[2 * j], oacc[2 * j + 1], half);
          x.x *= lrow[half]; x.y *= lrow[half]; x.z *= lrow[half]; x.w *= lrow[half];
          *reinterpret_cast<float4*>(og + j * 16) = x;
        }
      }
    }
"""


# The same with the fragment layouts (FRAG): Q interleaved once a block through registers, K by `cp.async` as above
# with S's key tiles paired (ks3_key), V through registers into V^T a tile ahead (its global loads issued before the
# tile's products, its stores after them); one 16-byte load a fragment of Q and two of V, none moved between registers.
SOURCE_FRAG = r"""
    constexpr int NW = BM / 16, NT = NW * 32, SQ = D + 16, VCH = BN * D / 4 / NT;
    extern __shared__ __align__(128) float ks_smem[];
    float* Qi = ks_smem;
    float* Ks = Qi + (BM / 2) * (2 * D + 16);
    float* Vt2 = Ks + 2 * BN * SQ;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int g = lane >> 2, tq = lane & 3;
""" + BLOCK_COORDS + r"""
    ks3_load<D, SQ, NT>(Ks, kg, BN, S);
    asm volatile("cp.async.commit_group;\n" ::);
    for (int i = threadIdx.x; i < BM * (D / 4); i += NT) {  // Q, interleaved
      const int r = i / (D / 4), x = (i % (D / 4)) * 4;
      const float4 v4 = r < L - m0 ? *reinterpret_cast<const float4*>(qg + (size_t)r * D + x) : make_float4(0, 0, 0, 0);
      Qi[ks3_qi_at<D>(r, x)] = v4.x; Qi[ks3_qi_at<D>(r, x + 1)] = v4.y;
      Qi[ks3_qi_at<D>(r, x + 2)] = v4.z; Qi[ks3_qi_at<D>(r, x + 3)] = v4.w;
    }
    float4 vpre[VCH];  // this thread's chunks of the next V tile: key i % BN, dims 4 (i / BN) .. + 3 of chunk i
    #pragma unroll
    for (int c = 0; c < VCH; ++c) {
      const int i = threadIdx.x + c * NT, key = i % BN, x = (i / BN) * 4;
      vpre[c] = key < S ? *reinterpret_cast<const float4*>(vg + (size_t)key * D + x) : make_float4(0, 0, 0, 0);
    }
    #pragma unroll
    for (int c = 0; c < VCH; ++c) {
      const int i = threadIdx.x + c * NT, key = i % BN, x = (i / BN) * 4;
      Vt2[ks3_vt<BN>(x, key)] = vpre[c].x; Vt2[ks3_vt<BN>(x + 1, key)] = vpre[c].y;
      Vt2[ks3_vt<BN>(x + 2, key)] = vpre[c].z; Vt2[ks3_vt<BN>(x + 3, key)] = vpre[c].w;
    }

""" + _STATE + r"""
    for (int t = 0; t < ntiles; ++t) {
      const int st = t & 1;
      if (t + 1 < ntiles) {
        const int n1 = (t + 1) * BN;
        ks3_load<D, SQ, NT>(Ks + (st ^ 1) * BN * SQ, kg + (size_t)n1 * D, BN, S - n1);
        asm volatile("cp.async.commit_group;\n" ::);
        asm volatile("cp.async.wait_group 1;\n" ::);
        #pragma unroll
        for (int c = 0; c < VCH; ++c) {
          const int i = threadIdx.x + c * NT, key = i % BN, x = (i / BN) * 4;
          vpre[c] = n1 + key < S ? *reinterpret_cast<const float4*>(vg + (size_t)(n1 + key) * D + x)
                                 : make_float4(0, 0, 0, 0);
        }
      } else {
        asm volatile("cp.async.wait_group 0;\n" ::);
      }
      __syncthreads();
      const float* Kt = Ks + st * BN * SQ;
      const float* Vt = Vt2 + st * D * BN;
      float s[BN / 8][4];
      #pragma unroll
      for (int n = 0; n < BN / 8; ++n) { s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0.f; }
      #pragma unroll
      for (int kp = 0; kp < D / 16; ++kp) {
        #pragma unroll
        for (int sk = 0; sk < 2; ++sk) {
          const int f = QREG ? 2 * kp + sk : 0;
          if (!QREG || t == 0) {
            const float4 a = *reinterpret_cast<const float4*>(Qi + ks3_qquad<D>(warp, lane, 2 * kp + sk));
            ks3_split(a.x, qb[f][0], qsm[f][0]); ks3_split(a.y, qb[f][1], qsm[f][1]);
            ks3_split(a.z, qb[f][2], qsm[f][2]); ks3_split(a.w, qb[f][3], qsm[f][3]);
          }
          #pragma unroll
          for (int n = 0; n < BN / 8; ++n) {
            float b[2];
            ks3_pick_b(*reinterpret_cast<const float4*>(Kt + ks3_kbf<D>(lane, n, kp)), sk, b);
            ks3_mma3(s[n], qb[f], qsm[f], b);
          }
        }
      }
""" + _softmax("16 * (n >> 1) + 4 * tq + 2 * (n & 1) + (e & 1)") + r"""
      #pragma unroll
      for (int j = 0; j < BN / 16; ++j) {
        unsigned pb[2][4], ps[2][4];
        #pragma unroll
        for (int i = 0; i < 4; ++i) {
          ks3_split(s[2 * j][ks3_pa(i)], pb[0][i], ps[0][i]);
          ks3_split(s[2 * j + 1][ks3_pa(i)], pb[1][i], ps[1][i]);
        }
        #pragma unroll
        for (int dn = 0; dn < D / 8; ++dn) {
          const float4 v = *reinterpret_cast<const float4*>(Vt + ks3_vtb<BN>(lane, j, dn));
          const float b0[2] = {v.x, v.y}, b1[2] = {v.z, v.w};
          ks3_mma3(oacc[dn], pb[0], ps[0], b0);
          ks3_mma3(oacc[dn], pb[1], ps[1], b1);
        }
      }
      if (t + 1 < ntiles) {  // the next V tile into the other stage, which no warp reads since this tile's barrier
        float* Vn = Vt2 + (st ^ 1) * D * BN;
        #pragma unroll
        for (int c = 0; c < VCH; ++c) {
          const int i = threadIdx.x + c * NT, key = i % BN, x = (i / BN) * 4;
          Vn[ks3_vt<BN>(x, key)] = vpre[c].x; Vn[ks3_vt<BN>(x + 1, key)] = vpre[c].y;
          Vn[ks3_vt<BN>(x + 2, key)] = vpre[c].z; Vn[ks3_vt<BN>(x + 3, key)] = vpre[c].w;
        }
      }
      __syncthreads();  // the next tile's K copy goes into the stage just read
    }
""" + _ROW_SUMS + r"""    #pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int row = row_lo + half * 8;
      if (row < L) {
        T* og = o + ((size_t)bhq * L + row) * D + 2 * tq;
        #pragma unroll
        for (int dn = 0; dn < D / 8; ++dn) {
          *reinterpret_cast<float2*>(og + dn * 8) =
              make_float2(oacc[dn][2 * half] * lrow[half], oacc[dn][2 * half + 1] * lrow[half]);
        }
      }
    }
"""


@dataclass(frozen=True)
class Tf32Config:
    bm: int = 64        # query rows a block (16 a warp)
    bn: int = 32        # keys a shared-memory tile (a multiple of 8)
    qreg: bool = False  # Q's split fragments in registers for the whole block (D / 2 more registers a thread)
    frag: bool = False  # the fragment layouts (SOURCE_FRAG)

    def smem_bytes(self, d: int) -> int:
        if self.frag:  # Q interleaved (pair-rows 2D + 16 long), two stages of K, two of V^T
            return (self.bm // 2 * (2 * d + 16) + 2 * self.bn * (d + 16) + 2 * d * self.bn) * 4
        return ((self.bm + 2 * self.bn) * (d + 16) + 2 * self.bn * (d + 4)) * 4  # Q, two stages of K and of V

    def name(self) -> str:
        return f"mma_tf32x3_m{self.bm}_n{self.bn}{'_qr' if self.qreg else ''}{'_fl' if self.frag else ''}"

    def source(self) -> str:
        return SOURCE_FRAG if self.frag else SOURCE


MAX_SMEM = 227 * 1024  # a block's limit on sm_90 (sm_80: 163 KB; the default takes 136 KB at D=128)


def default_config(d: int) -> Tf32Config:
    """The fragment layouts (SOURCE_FRAG): on an H100 ahead of the first form (SOURCE) at 11 of 12 shapes, 49-58
    against 43-45 TFLOP/s at D=128 from L=2048 (`prefill_fp32.py bench`). At D=64 64 rows a block with Q's fragments
    kept; at D=128 128 rows (8 warps share each K / V tile: 55.8 against 52.2 TFLOP/s with 64 at the fp32 holdout
    shape), Q's fragments split again every tile (kept, they would spill)."""
    return Tf32Config(bm=64 if d == 64 else 128, qreg=d == 64, frag=True)


def template_args(cfg: Tf32Config, causal: bool) -> list[tuple[str, Any]]:
    """The kernel's template constants besides T and D."""
    return [("BM", cfg.bm), ("BN", cfg.bn), ("CAUSAL", causal), ("QREG", cfg.qreg)]


def supports_shapes(q_shape: tuple[int, ...], k_shape: tuple[int, ...], v_shape: tuple[int, ...],
                    dtypes: tuple[Any, ...], causal: bool, cfg: Tf32Config) -> bool:
    """float32 q, k, v; D 64 or 128; GQA; any L and S (partial tiles are masked), causal only with L <= S."""
    import mlx.core as mx

    if any(dt != mx.float32 for dt in dtypes) or len(q_shape) != 4 or len(k_shape) != 4:
        return False
    b, hq, length, d = q_shape
    hkv, s = k_shape[1], k_shape[2]
    return (d in (64, 128) and v_shape == k_shape and k_shape[0] == b and k_shape[3] == d and hkv > 0
            and hq % hkv == 0 and length > 0 and s > 0 and (not causal or length <= s)
            and cfg.smem_bytes(d) <= MAX_SMEM and (not cfg.frag or cfg.bn % 16 == 0))


def supports(q: Any, k: Any, v: Any, causal: bool, cfg: Tf32Config | None = None) -> bool:
    return supports_shapes(tuple(q.shape), tuple(k.shape), tuple(v.shape), (q.dtype, k.dtype, v.dtype), causal,
                           cfg or default_config(q.shape[-1]))


def attention_tf32x3(q: Any, k: Any, v: Any, causal: bool = False, cfg: Tf32Config | None = None) -> Any:
    """softmax(q k^T / sqrt(D) + causal mask) v for float32 inputs, within fp32's accuracy (3xTF32); mask aligned
    lower right."""
    cfg = cfg or default_config(q.shape[-1])
    if not supports(q, k, v, causal, cfg):
        raise ValueError(f"attention_tf32x3: q {tuple(q.shape)} {q.dtype}, k {tuple(k.shape)}: needs float32, D 64 "
                         "or 128, v shaped as k, Hq a multiple of Hkv and, causal, L <= S")
    return launch(_launch(tuple(q.shape), bool(causal), cfg), q, k, v)


@lru_cache(maxsize=1024)
def _launch(q_shape: tuple[int, ...], causal: bool, cfg: Tf32Config) -> tuple[Any, dict[str, Any]]:
    """The kernel, its template arguments as constants, and its launch, once per shape (cuda_prefill.shape_launch)."""
    import mlx.core as mx

    return shape_launch(f"ks_{cfg.name()}", cfg.source(), TF32X3_HEADER, cfg.smem_bytes(q_shape[-1]), q_shape, mx.float32,
                        cfg.bm, cfg.bm // 16 * 32, template_args(cfg, causal))
