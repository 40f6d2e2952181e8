"""FlashAttention prefill on Hopper's `wgmma` (sm_90a) for MLX-CUDA: the route to cuDNN's speed that `mma.sync`
cannot reach (our mma.sync kernel measured 0.48x of cuDNN on the H200).

OPT-IN AND NOT YET RUN: written after the device time of its session was spent. It compiles with nvcc for sm_90a
(tests/test_attention_wgmma.py) and nothing more; `benchmarks/attention_wgmma_check.py` is the one-call GPU check
that tells which of its layout variants is right and how fast it is. `ksearch.kernels.attention` takes it only with
KSEARCH_WGMMA=1.

Design (FA-3 without TMA or warp specialisation): a block of WG warpgroups (128 threads each) owns 64 * WG query rows
of one (batch, head); warpgroup w owns rows 64w..64w+63. K / V tiles of 64 keys stream through shared memory with
`cp.async`, double-buffered. Shared tiles use the no-swizzle "core matrix" layout that wgmma descriptors describe:
8 rows x 16 bytes contiguous (128 B) per core matrix. S = Q K^T is `wgmma m64n64k16` with both operands in shared
memory (K-major); the online softmax (exp2, fp32) runs on the accumulator registers, whose layout is the register
A-operand layout, so P goes to `wgmma m64nDk16` for O += P V straight from registers. V is the B operand of that
product with N = D: either transposed by hand into a K-major tile (VMODE 0) or kept as loaded and read MN-major with
the instruction's transpose bit (VMODE 1, cheaper loads). LS_SWAP swaps the two byte offsets of the descriptors:
which assignment the hardware wants is the one thing we could not check without a GPU, so the check tries both.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ksearch.kernels.attention_cuda import build_kernel, fits, launch


def _wgmma_funcs(ctype: str, ptx: str) -> str:
    """Inline-PTX wrappers: SS (both operands from shared memory) with N=64, RS (A from registers) with N=64/128."""
    out = []
    n = 64
    regs = n // 2
    dl = ",".join(f"%{i}" for i in range(regs))
    cons = ", ".join(f'"+f"(d[{i}])' for i in range(regs))
    out.append(f"""
template <> struct KsWg<{ctype}> {{
  template <int TB>
  static __device__ __forceinline__ void ss64(float* d, unsigned long long da, unsigned long long db, int acc) {{
    asm volatile("{{\\n.reg .pred p;\\nsetp.ne.b32 p, %{regs + 2}, 0;\\n"
                 "wgmma.mma_async.sync.aligned.m64n64k16.f32.{ptx}.{ptx} {{{dl}}}, %{regs}, %{regs + 1}, p, 1, 1, 0, %{regs + 3};\\n}}\\n"
                 : {cons} : "l"(da), "l"(db), "r"(acc), "n"(TB));
  }}""")
    for n in (64, 128):
        regs = n // 2
        dl = ",".join(f"%{i}" for i in range(regs))
        cons = ", ".join(f'"+f"(d[{i}])' for i in range(regs))
        a = ",".join(f"%{regs + i}" for i in range(4))
        out.append(f"""
  template <int TB>
  static __device__ __forceinline__ void rs{n}(float* d, const unsigned* a, unsigned long long db) {{
    asm volatile("{{\\n.reg .pred p;\\nsetp.ne.b32 p, %{regs + 5}, 0;\\n"
                 "wgmma.mma_async.sync.aligned.m64n{n}k16.f32.{ptx}.{ptx} {{{dl}}}, {{{a}}}, %{regs + 4}, p, 1, 1, %{regs + 6};\\n}}\\n"
                 : {cons} : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(1), "n"(TB));
  }}""")
    out.append("};")
    return "\n".join(out)


HEADER = r"""
#ifndef KS_WGMMA_HEADER
#define KS_WGMMA_HEADER
template <typename T> struct KsWg;
""" + _wgmma_funcs("__half", "f16") + _wgmma_funcs("__nv_bfloat16", "bf16") + r"""
template <typename T> __device__ __forceinline__ unsigned ks_pack2(float x, float y);
template <> __device__ __forceinline__ unsigned ks_pack2<__half>(float x, float y) {
  __half2 h = __floats2half2_rn(x, y); return *reinterpret_cast<unsigned*>(&h);
}
template <> __device__ __forceinline__ unsigned ks_pack2<__nv_bfloat16>(float x, float y) {
  __nv_bfloat162 h = __floats2bfloat162_rn(x, y); return *reinterpret_cast<unsigned*>(&h);
}
// Pins an accumulator register between asm statements: without it the compiler may read an accumulator before the
// wait on its asynchronous wgmma, or write it (a rescale) after the wgmma that reads it was issued.
__device__ __forceinline__ void ks_fence_reg(float& r) { asm volatile("" : "+f"(r) :: "memory"); }
template <int N> __device__ __forceinline__ void ks_fence_regs(float* r) {
  #pragma unroll
  for (int i = 0; i < N; ++i) ks_fence_reg(r[i]);
}
__device__ __forceinline__ void ks_wg_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void ks_wg_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void ks_wg_wait0() { asm volatile("wgmma.wait_group.sync.aligned 0;\n" ::: "memory"); }
// Shared-memory writes of the generic proxy (st.shared, cp.async) become visible to wgmma's async proxy.
__device__ __forceinline__ void ks_proxy_fence() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }
__device__ __forceinline__ void ks_cp16w(void* smem, const void* gmem) {
  unsigned s = (unsigned)__cvta_generic_to_shared(smem);
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" :: "r"(s), "l"(gmem));
}
__device__ __forceinline__ void ks_commit_w() { asm volatile("cp.async.commit_group;\n" ::); }
__device__ __forceinline__ void ks_wait_all_w() { asm volatile("cp.async.wait_group 0;\n" ::); }
// wgmma shared-memory matrix descriptor, no swizzle: start address, leading and stride byte offsets (16-byte units).
__device__ __forceinline__ unsigned long long ks_desc(const void* p, int lbo, int sbo) {
  unsigned addr = (unsigned)__cvta_generic_to_shared(p);
  return (unsigned long long)((addr & 0x3FFFF) >> 4) | ((unsigned long long)((lbo >> 4) & 0x3FFF) << 16) |
         ((unsigned long long)((sbo >> 4) & 0x3FFF) << 32);
}
// Element offset of (row, col) in a tile of C columns stored as 8x8 core matrices (8 rows x 16 bytes each),
// core matrices row-major over the tile.
template <int C> __device__ __forceinline__ int ks_core(int r, int c) {
  return ((r >> 3) * (C >> 3) + (c >> 3)) * 64 + (r & 7) * 8 + (c & 7);
}
// rows x C tile, rows contiguous in global memory (row stride C), into the core-matrix layout; NT threads.
template <int C, int NT, typename T> __device__ __forceinline__ void ks_load_core(T* sm, const T* g, int rows) {
  constexpr int CPR = C / 8;
  for (int i = threadIdx.x; i < rows * CPR; i += NT) {
    int r = i / CPR, c = (i % CPR) * 8;
    ks_cp16w(sm + ks_core<C>(r, c), g + (size_t)r * C + c);
  }
}
// V tile (BN keys x D) transposed into a K-major (D rows x BN keys) core-matrix tile, by registers.
template <int D, int BN, int NT, typename T> __device__ __forceinline__ void ks_load_vt(T* sm, const T* g) {
  constexpr int CPR = D / 8;
  for (int i = threadIdx.x; i < BN * CPR; i += NT) {
    int key = i / CPR, d0 = (i % CPR) * 8;
    uint4 raw = *reinterpret_cast<const uint4*>(g + (size_t)key * D + d0);
    const T* v = reinterpret_cast<const T*>(&raw);
    #pragma unroll
    for (int j = 0; j < 8; ++j) sm[ks_core<BN>(d0 + j, key)] = v[j];
  }
}
#endif
"""

# Template constants: T, D (64 | 128), WG (warpgroups per block), CAUSAL, VMODE (0: V transposed by hand,
# 1: V as loaded, read with the transpose bit), LS_SWAP (swap the descriptors' two byte offsets).
SOURCE = r"""
    constexpr int BM = 64 * WG, BN = 64, NT = 128 * WG;
    constexpr int QB = BM * D, KB = BN * D;
    extern __shared__ __align__(128) unsigned char ks_smem[];
    T* Qs = reinterpret_cast<T*>(ks_smem);
    T* Ks = Qs + QB;            // 2 stages
    T* Vs = Ks + 2 * KB;        // 2 stages
    const int wg = threadIdx.x / 128, wt = threadIdx.x % 128;
    const int warp = wt / 32, lane = wt % 32, g = lane >> 2, tq = lane & 3;
    const int Hq = q_shape[1], L = q_shape[2], Hkv = k_shape[1], S = k_shape[2];
    const int mt = gridDim.x - 1 - blockIdx.x;  // longest causal tiles first
    const int bhq = blockIdx.y, b = bhq / Hq, h = bhq % Hq, hk = h / (Hq / Hkv);
    const int m0 = mt * BM, shift = S - L;
    const T* qg = q + ((size_t)bhq * L + m0) * D;
    const T* kg = k + (size_t)(b * Hkv + hk) * S * D;
    const T* vg = v + (size_t)(b * Hkv + hk) * S * D;
    const int n_end = CAUSAL ? min(S, m0 + BM + shift) : S;
    const int ntiles = (n_end + BN - 1) / BN;
    const float sl2 = scale[0] * 1.4426950408889634f;
    // Byte offsets between core matrices: along K (leading) and along M/N (stride), for each operand's layout.
    const int qk_lead = LS_SWAP ? (D / 8) * 128 : 128, qk_stride = LS_SWAP ? 128 : (D / 8) * 128;
    // VMODE 0: V^T tile (D rows x BN keys), K-major. VMODE 1: V tile (BN keys x D), MN-major, transpose bit set.
    const int v_lead = VMODE ? (LS_SWAP ? 128 : (D / 8) * 128) : (LS_SWAP ? (BN / 8) * 128 : 128);
    const int v_stride = VMODE ? (LS_SWAP ? (D / 8) * 128 : 128) : (LS_SWAP ? 128 : (BN / 8) * 128);

    ks_load_core<D, NT>(Qs, qg, BM);
    ks_load_core<D, NT>(Ks, kg, BN);
    if (VMODE) ks_load_core<D, NT>(Vs, vg, BN); else ks_load_vt<D, BN, NT>(Vs, vg);
    ks_commit_w();

    float oacc[D / 2];
    #pragma unroll
    for (int i = 0; i < D / 2; ++i) oacc[i] = 0.f;
    float mrow[2] = {-1e30f, -1e30f}, lrow[2] = {0.f, 0.f};
    const int row_lo = m0 + wg * 64 + warp * 16 + g;  // this lane's rows: row_lo and row_lo + 8
    const T* Qw = Qs + wg * 64 * D;                    // this warpgroup's 64 rows (8 core-matrix rows)

    for (int t = 0; t < ntiles; ++t) {
      const int st = t & 1;
      ks_wait_all_w();
      ks_proxy_fence();
      __syncthreads();
      if (t + 1 < ntiles) {  // prefetch the next tile into the other stage while this one computes
        ks_load_core<D, NT>(Ks + (st ^ 1) * KB, kg + (size_t)(t + 1) * BN * D, BN);
        if (VMODE) ks_load_core<D, NT>(Vs + (st ^ 1) * KB, vg + (size_t)(t + 1) * BN * D, BN);
        ks_commit_w();
      }
      const T* Kt = Ks + st * KB;
      const T* Vt = Vs + st * KB;
      float s[BN / 2];
      #pragma unroll
      for (int i = 0; i < BN / 2; ++i) s[i] = 0.f;  // scale-d = 0 on the first product ignores them; no undefined reads
      ks_fence_regs<BN / 2>(s);
      ks_wg_fence();
      #pragma unroll
      for (int kc = 0; kc < D / 16; ++kc) {
        KsWg<T>::template ss64<0>(s, ks_desc(Qw + kc * 128, qk_lead, qk_stride),
                                  ks_desc(Kt + kc * 128, qk_lead, qk_stride), kc > 0);
      }
      ks_wg_commit();
      ks_wg_wait0();
      ks_fence_regs<BN / 2>(s);
      const int n0 = t * BN;
      const bool need_mask = CAUSAL && (n0 + BN - 1 > m0 + wg * 64 + warp * 16 + shift);
      float mx[2] = {mrow[0], mrow[1]};
      #pragma unroll
      for (int i = 0; i < BN / 2; ++i) {
        float x = s[i] * sl2;
        if (need_mask) {
          int key = n0 + (i >> 2) * 8 + 2 * tq + (i & 1);
          int row = row_lo + (((i >> 1) & 1) << 3);
          if (key > row + shift) x = -INFINITY;
        }
        s[i] = x;
        mx[(i >> 1) & 1] = fmaxf(mx[(i >> 1) & 1], x);
      }
      #pragma unroll
      for (int r = 0; r < 2; ++r) {
        mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 1));
        mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 2));
      }
      float corr[2] = {exp2f(mrow[0] - mx[0]), exp2f(mrow[1] - mx[1])};
      mrow[0] = mx[0]; mrow[1] = mx[1];
      lrow[0] *= corr[0]; lrow[1] *= corr[1];
      #pragma unroll
      for (int i = 0; i < D / 2; ++i) oacc[i] *= corr[(i >> 1) & 1];
      unsigned pa[BN / 16][4];
      #pragma unroll
      for (int j = 0; j < BN / 8; ++j) {
        float p0 = exp2f(s[4 * j] - mx[0]), p1 = exp2f(s[4 * j + 1] - mx[0]);
        float p2 = exp2f(s[4 * j + 2] - mx[1]), p3 = exp2f(s[4 * j + 3] - mx[1]);
        lrow[0] += p0 + p1; lrow[1] += p2 + p3;
        pa[j >> 1][(j & 1) * 2] = ks_pack2<T>(p0, p1);
        pa[j >> 1][(j & 1) * 2 + 1] = ks_pack2<T>(p2, p3);
      }
      ks_fence_regs<D / 2>(oacc);
      ks_wg_fence();
      #pragma unroll
      for (int kk = 0; kk < BN / 16; ++kk) {
        // 16 keys: VMODE 0 -> columns 16kk.. of the V^T tile; VMODE 1 -> rows 16kk.. of the V tile.
        const T* vp = VMODE ? Vt + kk * 2 * (D / 8) * 64 : Vt + kk * 128;
        if (D == 128) KsWg<T>::template rs128<VMODE>(oacc, pa[kk], ks_desc(vp, v_lead, v_stride));
        else KsWg<T>::template rs64<VMODE>(oacc, pa[kk], ks_desc(vp, v_lead, v_stride));
      }
      ks_wg_commit();
      ks_wg_wait0();
      ks_fence_regs<D / 2>(oacc);
      __syncthreads();  // every warpgroup is done with stage st before it is refilled
      if (!VMODE && t + 1 < ntiles) ks_load_vt<D, BN, NT>(Vs + (st ^ 1) * KB, vg + (size_t)(t + 1) * BN * D);
    }
    #pragma unroll
    for (int r = 0; r < 2; ++r) {
      lrow[r] += __shfl_xor_sync(0xffffffffu, lrow[r], 1);
      lrow[r] += __shfl_xor_sync(0xffffffffu, lrow[r], 2);
      lrow[r] = 1.f / lrow[r];
    }
    T* og = o + ((size_t)bhq * L + row_lo) * D + 2 * tq;
    #pragma unroll
    for (int j = 0; j < D / 8; ++j) {
      *reinterpret_cast<unsigned*>(og + j * 8) = ks_pack2<T>(oacc[4 * j] * lrow[0], oacc[4 * j + 1] * lrow[0]);
      *reinterpret_cast<unsigned*>(og + 8 * D + j * 8) =
          ks_pack2<T>(oacc[4 * j + 2] * lrow[1], oacc[4 * j + 3] * lrow[1]);
    }
"""


@dataclass(frozen=True)
class WgmmaConfig:
    wg: int = 1          # warpgroups per block (64 query rows each)
    # 0: V transposed by hand into a K-major tile: only the K-major layout, whose byte offsets match a public wgmma
    # test (LBO along K = 128 B, SBO along M/N), is relied on. 1: V read MN-major with the transpose bit (cheaper
    # loads, offsets unverified).
    vmode: int = 0
    ls_swap: bool = False  # swap the descriptors' leading / stride byte offsets (unverified which one is right)

    def smem_bytes(self, d: int) -> int:
        return (64 * self.wg + 4 * 64) * d * 2


def supports(q: Any, k: Any, v: Any, causal: bool, cfg: WgmmaConfig) -> bool:
    return fits(q, k, v, causal, 64 * cfg.wg, 64, cfg.smem_bytes(q.shape[-1]))


def attention_wgmma(q: Any, k: Any, v: Any, causal: bool = False, cfg: WgmmaConfig | None = None) -> Any:
    cfg = cfg or WgmmaConfig()
    kern = build_kernel(f"ks_flash_wgmma_wg{cfg.wg}_v{cfg.vmode}_s{int(cfg.ls_swap)}", SOURCE, HEADER,
                        cfg.smem_bytes(q.shape[-1]))
    return launch(kern, q, k, v, 64 * cfg.wg, 128 * cfg.wg,
                  [("WG", cfg.wg), ("CAUSAL", bool(causal)), ("VMODE", cfg.vmode), ("LS_SWAP", cfg.ls_swap)])
