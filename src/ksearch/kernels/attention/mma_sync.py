"""FlashAttention-2 style prefill for MLX-CUDA on tensor cores (inline PTX `mma.sync` m16n8k16 + `ldmatrix`).

One block per (query tile of BM rows, batch * query head); each warp owns 16 query rows whose Q fragments stay in
registers. K/V tiles of BN keys stream through dynamic shared memory with `cp.async` (double-buffered when DB), in a
layout whose 16-byte chunks are XOR-swizzled by row so that `ldmatrix` hits 8 distinct bank groups. S = Q K^T comes
from `ldmatrix` on row-major K (that load *is* the K transposition); P stays in registers (the accumulator layout of
S is the A-operand layout of P V), V comes through `ldmatrix.trans`. Online softmax in fp32 with the exp2 trick; causal
tiles beyond the diagonal are never loaded, and only tiles crossing it are masked; heavy causal query tiles are
scheduled first. GQA: query head h reads kv head h / (Hq / Hkv) with no repetition.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from ksearch.kernels.attention.cuda_prefill import BLOCK_COORDS, fits, launch, shape_launch
from ksearch.kernels.cuda_headers import MMA_SYNC_HEADER

# Template constants: T, D (64 | 128), BM (16 * warps), BN (keys per tile, multiple of 16), CAUSAL, DB.
SOURCE = r"""
    constexpr int NW = BM / 16, NT = NW * 32, STAGES = DB ? 2 : 1;
    extern __shared__ __align__(128) unsigned char ks_smem[];
    T* Qs = reinterpret_cast<T*>(ks_smem);
    T* Ks = Qs + BM * D;
    T* Vs = Ks + STAGES * BN * D;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int g = lane >> 2, tq = lane & 3;
""" + BLOCK_COORDS + r"""
    ks_load_tile<D, NT>(Qs, qg, BM);
    ks_load_tile<D, NT>(Ks, kg, BN);
    ks_load_tile<D, NT>(Vs, vg, BN);
    ks_commit();

    unsigned qa[D / 16][4];
    float oacc[D / 8][4];
    #pragma unroll
    for (int n = 0; n < D / 8; ++n) { oacc[n][0] = oacc[n][1] = oacc[n][2] = oacc[n][3] = 0.f; }
    float mrow[2] = {-1e30f, -1e30f}, lrow[2] = {0.f, 0.f};
    const int row_lo = m0 + warp * 16 + g;  // this lane's rows: row_lo and row_lo + 8

    for (int t = 0; t < ntiles; ++t) {
      const int st = DB ? (t & 1) : 0;
      if (DB && t + 1 < ntiles) {
        const int ns = (t + 1) & 1;
        ks_load_tile<D, NT>(Ks + ns * BN * D, kg + (size_t)(t + 1) * BN * D, BN);
        ks_load_tile<D, NT>(Vs + ns * BN * D, vg + (size_t)(t + 1) * BN * D, BN);
        ks_commit();
        ks_wait<1>();
      } else {
        ks_wait<0>();
      }
      __syncthreads();
      if (t == 0) {
        #pragma unroll
        for (int kk = 0; kk < D / 16; ++kk) {
          int r = warp * 16 + (lane & 15);
          ks_ldsm4(qa[kk], Qs + ks_sw<D>(r, kk * 2 + (lane >> 4)));
        }
      }
      const T* Kt = Ks + st * BN * D;
      const T* Vt = Vs + st * BN * D;
      float s[BN / 8][4];
      #pragma unroll
      for (int n = 0; n < BN / 8; ++n) { s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0.f; }
      #pragma unroll
      for (int kk = 0; kk < D / 16; ++kk) {
        #pragma unroll
        for (int nn = 0; nn < BN / 16; ++nn) {
          unsigned kb[4];
          int r = nn * 16 + (lane & 7) + ((lane >> 4) << 3);
          ks_ldsm4(kb, Kt + ks_sw<D>(r, kk * 2 + ((lane >> 3) & 1)));
          KsMma<T>::mma(s[2 * nn], qa[kk], kb[0], kb[1]);
          KsMma<T>::mma(s[2 * nn + 1], qa[kk], kb[2], kb[3]);
        }
      }
      const int n0 = t * BN;
      // Only tiles that cross this warp's diagonal need the mask.
      const bool need_mask = CAUSAL && (n0 + BN - 1 > m0 + warp * 16 + shift);
      float mx[2] = {mrow[0], mrow[1]};
      #pragma unroll
      for (int n = 0; n < BN / 8; ++n) {
        #pragma unroll
        for (int e = 0; e < 4; ++e) {
          float x = s[n][e] * sl2;
          if (need_mask) {
            int key = n0 + n * 8 + 2 * tq + (e & 1);
            int row = row_lo + ((e >> 1) << 3);
            if (key > row + shift) x = -INFINITY;
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
      float corr[2] = {exp2f(mrow[0] - mx[0]), exp2f(mrow[1] - mx[1])};
      mrow[0] = mx[0]; mrow[1] = mx[1];
      lrow[0] *= corr[0]; lrow[1] *= corr[1];
      #pragma unroll
      for (int n = 0; n < D / 8; ++n) {
        oacc[n][0] *= corr[0]; oacc[n][1] *= corr[0]; oacc[n][2] *= corr[1]; oacc[n][3] *= corr[1];
      }
      unsigned pa[BN / 16][4];
      #pragma unroll
      for (int n = 0; n < BN / 8; ++n) {
        float p0 = exp2f(s[n][0] - mx[0]), p1 = exp2f(s[n][1] - mx[0]);
        float p2 = exp2f(s[n][2] - mx[1]), p3 = exp2f(s[n][3] - mx[1]);
        lrow[0] += p0 + p1; lrow[1] += p2 + p3;
        pa[n >> 1][(n & 1) * 2] = KsMma<T>::pack(p0, p1);
        pa[n >> 1][(n & 1) * 2 + 1] = KsMma<T>::pack(p2, p3);
      }
      #pragma unroll
      for (int kk = 0; kk < BN / 16; ++kk) {
        #pragma unroll
        for (int dn = 0; dn < D / 16; ++dn) {
          unsigned vb[4];
          int r = kk * 16 + (lane & 7) + (((lane >> 3) & 1) << 3);
          ks_ldsm4t(vb, Vt + ks_sw<D>(r, dn * 2 + (lane >> 4)));
          KsMma<T>::mma(oacc[2 * dn], pa[kk], vb[0], vb[1]);
          KsMma<T>::mma(oacc[2 * dn + 1], pa[kk], vb[2], vb[3]);
        }
      }
      __syncthreads();
      if (!DB && t + 1 < ntiles) {
        ks_load_tile<D, NT>(Ks, kg + (size_t)(t + 1) * BN * D, BN);
        ks_load_tile<D, NT>(Vs, vg + (size_t)(t + 1) * BN * D, BN);
        ks_commit();
      }
    }
    #pragma unroll
    for (int i = 0; i < 2; ++i) {
      lrow[i] += __shfl_xor_sync(0xffffffffu, lrow[i], 1);
      lrow[i] += __shfl_xor_sync(0xffffffffu, lrow[i], 2);
      lrow[i] = 1.f / lrow[i];
    }
    T* og = o + ((size_t)bhq * L + row_lo) * D + 2 * tq;
    #pragma unroll
    for (int n = 0; n < D / 8; ++n) {
      *reinterpret_cast<unsigned*>(og + n * 8) = KsMma<T>::pack(oacc[n][0] * lrow[0], oacc[n][1] * lrow[0]);
      *reinterpret_cast<unsigned*>(og + 8 * D + n * 8) =
          KsMma<T>::pack(oacc[n][2] * lrow[1], oacc[n][3] * lrow[1]);
    }
"""


@dataclass(frozen=True)
class PrefillConfig:
    bm: int = 64      # query rows per block (16 per warp)
    bn: int = 64      # keys per shared-memory tile
    db: bool = True   # double-buffer K/V tiles (cp.async prefetch of the next tile during compute)

    def smem_bytes(self, d: int) -> int:
        return (self.bm + 2 * (2 if self.db else 1) * self.bn) * d * 2


def supports(q: Any, k: Any, v: Any, causal: bool, cfg: PrefillConfig) -> bool:
    return fits(q, k, v, causal, cfg.bm, cfg.bn, cfg.smem_bytes(q.shape[-1]))


def attention_cuda(q: Any, k: Any, v: Any, causal: bool = False, cfg: PrefillConfig | None = None) -> Any:
    return launch(_launch(tuple(q.shape), q.dtype, bool(causal), cfg or PrefillConfig()), q, k, v)


@lru_cache(maxsize=1024)
def _launch(q_shape: tuple[int, ...], dtype: Any, causal: bool, cfg: PrefillConfig) -> tuple[Any, dict[str, Any]]:
    """The kernel, its template arguments as constants, and its launch, once per shape (cuda_prefill.shape_launch)."""
    return shape_launch(f"ks_flash_fwd_m{cfg.bm}_n{cfg.bn}_{'db' if cfg.db else 'sb'}", SOURCE, MMA_SYNC_HEADER,
                        cfg.smem_bytes(q_shape[-1]), q_shape, dtype, cfg.bm, cfg.bm // 16 * 32,
                        [("BM", cfg.bm), ("BN", cfg.bn), ("CAUSAL", causal), ("DB", cfg.db)])
