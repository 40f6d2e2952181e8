"""FlashAttention prefill on Hopper's `wgmma` (sm_90a) for MLX-CUDA: the route to cuDNN's speed that `mma.sync`
cannot reach (our mma.sync kernel measured 0.48x of cuDNN on the H200).

`ksearch.kernels.attention` runs its warp-specialised sibling on Hopper (wgmma_ws.py: a producer warpgroup
loading K / V by bulk copies; KSEARCH_WGMMA=0 turns wgmma off); this synchronous kernel, where every thread loads
with cp.async, is the template the sibling shares its steps with and stays selectable (KSEARCH_WGMMA_CONFIG=wg3_n64).
Measured on the H200 (benchmarks/results/attention-wgmma-check-*.json): 3 warpgroups a block reach 354-377 TFLOP/s
fp16 at L=8192, D=128, against cuDNN's 590-614; the sibling 547-553. Design and numbers: docs/kernels-attention.md.

Design (FA-3 without TMA): a block of WG warpgroups (128 threads each) owns 64 * WG query rows of one (batch, head);
warpgroup w owns rows 64w..64w+63 and they share every K / V tile. Tiles of BN keys stream through shared memory
with `cp.async`, one tile ahead. Shared tiles use the no-swizzle "core matrix" layout that wgmma descriptors describe:
8 rows x 16 bytes contiguous (128 B) per core matrix. S = Q K^T is `wgmma m64nBNk16` with both operands in shared
memory (K-major); the online softmax (exp2, fp32) runs on the accumulator registers, whose layout is the register
A-operand layout, so P goes to `wgmma m64nDk16` for O += P V straight from registers, with V read MN-major through
the transpose bit. Step t issues S(t), rescales O while it runs, issues O += P(t-1) V(t-1) and runs tile t's softmax
while that product is on the tensor cores; P's row sums are a third product (P times ones), which is also what keeps
ptxas from hoisting the wait on P V above the softmax (see pipeline()).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from ksearch.kernels.attention.cuda_prefill import BLOCK_COORDS, fits, launch, shape_launch
from ksearch.kernels.cuda_headers import WGMMA_HEADER

# The kernel body in parts that the two variants share (template constants: T, D 64 | 128, WG warpgroups per block,
# BN 64 | 128 keys per tile, CAUSAL; STAGES K / V stages).
# SETUP = SETUP_SMEM + BLOCK_COORDS + ROWS_HERE + SETUP_LAYOUT; the persistent kernel (wgmma_ws.py) takes the
# block's coordinates per work item instead.
SETUP_SMEM = r"""
    constexpr int BM = 64 * WG, NT = 128 * WG;
    constexpr int QB = BM * D, KB = BN * D;
    extern __shared__ __align__(128) unsigned char ks_smem[];
    T* ones = reinterpret_cast<T*>(ks_smem);  // 16 x 8 ones: the B operand of P's row sums
    T* Qs = ones + 128;
    // STAGES stages; a 128-byte swizzled layout (KV_LAYOUT 2) repeats every 1024 bytes of shared address
    T* Ks = Qs + QB + (KV_LAYOUT == 2 ? ((1024 - (ks_saddr(Qs + QB) & 1023)) & 1023) / sizeof(T) : 0);
    T* Vs = Ks + STAGES * KB;       // STAGES stages
    const int wg = threadIdx.x / 128, wt = threadIdx.x % 128;
    const int warp = wt / 32, lane = wt % 32, g = lane >> 2, tq = lane & 3;
"""
ROWS_HERE = r"""
    const int rows_here = min(BM, L - m0);  // the last block may be partial (L a multiple of 64, not of BM)
"""
SETUP_LAYOUT = r"""    // Byte offsets between core matrices (checked on the H200): Q and K are K-major (leading 128 B along the head
    // dim, stride one core-matrix row); V is read MN-major with the transpose bit (leading one core-matrix row of V).
    constexpr int qk_lead = 128, qk_stride = (D / 8) * 128;
    // K / V tiles in one of three layouts (KV_LAYOUT, set by the source before this), as leading / stride byte offsets
    // of their descriptors (K is K-major, V MN-major) and V's step per 16 keys, in bytes:
    // 0: core-matrix rows of the tile one after another, like Q (tile images, cp.async);
    // 1: column-major in 16-byte columns of BN rows (tensor copies of 16-byte boxes);
    // 2: 128-byte swizzle (tensor copies of 64-element boxes): each 64 columns a region of BN rows x 128 bytes, 8 rows
    //    an atom of 1024 bytes; K's leading offset unused, V's the distance between regions.
    constexpr int KL[3] = {128, BN * 16, 16}, KS[3] = {(D / 8) * 128, 128, 1024};
    constexpr int VL[3] = {(D / 8) * 128, 128, BN * 128}, VS[3] = {128, BN * 16, 1024}, VSTEP[3] = {32 * D, 256, 2048};
    constexpr int k_lead = KL[KV_LAYOUT], k_stride = KS[KV_LAYOUT], v_lead = VL[KV_LAYOUT], v_stride = VS[KV_LAYOUT];
    constexpr int v_step = VSTEP[KV_LAYOUT] / 16;  // descriptor units (16 B)
    constexpr unsigned long long kv_swizzle = KV_LAYOUT == 2 ? 1ull << 62 : 0;  // the descriptor's layout type
    if (threadIdx.x < 128) ones[threadIdx.x] = T(1.f);
    ks_proxy_fence();  // visible to wgmma after the block barrier every variant passes before its first product

"""
SETUP = SETUP_SMEM + BLOCK_COORDS + ROWS_HERE + SETUP_LAYOUT
REGISTERS = r"""
    float oacc[D / 2];
    #pragma unroll
    for (int i = 0; i < D / 2; ++i) oacc[i] = 0.f;
    float s[BN / 2];
    unsigned pa[2][BN / 16][4];  // P of two tiles: one in flight in O += P V while the next is packed
    // Running row maxima of the raw scores (the scale is positive): p = exp2(s * sl2 - m * sl2) is one FFMA.
    float mrow[2] = {-1e30f, -1e30f}, corr[2] = {1.f, 1.f};
    // Row sums of P on the tensor cores (P times ones, m64n8k16): every column holds the row's sum, so lacc[0] is
    // row_lo's and lacc[2] row_lo + 8's. They sum the rounded P that O += P V multiplies, and the wgmma that computes
    // them is what keeps ptxas from hoisting the wait on that P V above the softmax (see pipeline()).
    float lacc[4] = {0.f, 0.f, 0.f, 0.f};
    const int row_lo = m0 + wg * 64 + warp * 16 + g;  // this lane's rows: row_lo and row_lo + 8
    // Descriptors of stage 0 and this warpgroup's Q, once: a tile's descriptors add constants to them (shared
    // addresses stay below 2^18, so the 14-bit address field never carries into the offsets).
    const unsigned long long dq0 = ks_desc(Qs + wg * 64 * D, qk_lead, qk_stride);
    const unsigned long long dk0 = ks_desc(Ks, k_lead, k_stride) | kv_swizzle;
    const unsigned long long dv0 = ks_desc(Vs, v_lead, v_stride) | kv_swizzle;
    const unsigned long long d1 = ks_desc(ones, 128, 256);

"""
STEPS = r"""
    // K's offset for its 16 columns kc, in descriptor units: two core-matrix columns on (layouts 0 and 1); 32 bytes
    // along a 128-byte row, and BN rows x 128 bytes to the next 64 columns (layout 2).
    auto k_off = [](int kc) {
      return KV_LAYOUT == 2 ? (kc >> 2) * (BN * 8) + (kc & 3) * 2 : (KV_LAYOUT == 1 ? 2 * BN : 16) * kc;
    };
    auto issue_s = [&](int t) {  // S = Q K(t)^T; 16 columns of Q are 256 bytes on (16 in descriptor units)
      const unsigned long long dk = dk0 + (unsigned long long)((t % STAGES) * KB * 2 / 16);
      #pragma unroll
      for (int kc = 0; kc < D / 16; ++kc) {
        if (BN == 128) {
          if (kc == 0) KsWg<T>::ss128z(s, dq0, dk); else KsWg<T>::ss128(s, dq0 + 16 * kc, dk + k_off(kc));
        } else {
          if (kc == 0) KsWg<T>::ss64z(s, dq0, dk); else KsWg<T>::ss64(s, dq0 + 16 * kc, dk + k_off(kc));
        }
      }
      ks_wg_commit();
    };
    auto issue_pv = [&](int t, unsigned (&p)[BN / 16][4]) {  // O += P(t) V(t), 16 keys (two core-matrix rows of V) at a time
      const unsigned long long dv = dv0 + (unsigned long long)((t % STAGES) * KB * 2 / 16);
      #pragma unroll
      for (int kk = 0; kk < BN / 16; ++kk) {
        if (D == 128) KsWg<T>::template rs128<1>(oacc, p[kk], dv + v_step * kk);
        else KsWg<T>::template rs64<1>(oacc, p[kk], dv + v_step * kk);
      }
      ks_wg_commit();
    };
    // Tile t's online softmax, in place on s: new row maxima, corr and P in fp32.
    auto softmax = [&](int t) {
      const int n0 = t * BN;
      const bool need_mask = CAUSAL && (n0 + BN - 1 > m0 + wg * 64 + warp * 16 + shift);
      float mx[2] = {mrow[0], mrow[1]};
      if (need_mask) {
        // Element i sits at key n0 + 2 tq + (i / 4) * 8 + i % 2 of row row_lo + ((i / 2) % 2) * 8: masked where its
        // constant offset (i / 4) * 8 + i % 2 - ((i / 2) % 2) * 8 exceeds one per-tile limit (one register, one
        // compare with an immediate per element; the direct form cost the causal kernel 20 bytes of spills).
        const int lim = row_lo + shift - n0 - 2 * tq;
        #pragma unroll
        for (int i = 0; i < BN / 2; ++i) {
          if ((i >> 2) * 8 + (i & 1) - (((i >> 1) & 1) << 3) > lim) s[i] = -INFINITY;
        }
      }
      #pragma unroll
      for (int i = 0; i < BN / 2; ++i) mx[(i >> 1) & 1] = fmaxf(mx[(i >> 1) & 1], s[i]);
      float msc[2];
      #pragma unroll
      for (int r = 0; r < 2; ++r) {
        mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 1));
        mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 2));
        corr[r] = ks_exp2((mrow[r] - mx[r]) * sl2);
        mrow[r] = mx[r];
        msc[r] = mx[r] * sl2;
      }
      #pragma unroll
      for (int i = 0; i < BN / 2; ++i) {
        s[i] = ks_exp2(fmaf(s[i], sl2, -msc[(i >> 1) & 1]));
      }
    };
    auto rescale = [&]() {  // O *= corr of the tile whose P V is issued next
      #pragma unroll
      for (int i = 0; i < D / 2; ++i) oacc[i] *= corr[(i >> 1) & 1];
    };
    auto issue_sum = [&](unsigned (&p)[BN / 16][4]) {  // lacc = corr * lacc + rowsum(P)
      lacc[0] *= corr[0]; lacc[1] *= corr[0]; lacc[2] *= corr[1]; lacc[3] *= corr[1];
      ks_fence_regs<4>(lacc);
      ks_fence_u<BN / 4>(&p[0][0]);
      ks_wg_fence();
      #pragma unroll
      for (int kk = 0; kk < BN / 16; ++kk) KsWg<T>::rs8(lacc, p[kk], d1);
      ks_wg_commit();
    };
    // P as fp16 / bf16 A-operand registers, into the buffer the product in flight does not read: writing registers
    // of an in-flight wgmma would make ptxas wait for it first (or serialise every wgmma of the kernel, C7513).
    auto pack_p = [&](unsigned (&p)[BN / 16][4]) {
      #pragma unroll
      for (int j = 0; j < BN / 8; ++j) {
        p[j >> 1][(j & 1) * 2] = ks_pack2<T>(s[4 * j], s[4 * j + 1]);
        p[j >> 1][(j & 1) * 2 + 1] = ks_pack2<T>(s[4 * j + 2], s[4 * j + 3]);
      }
    };

"""
EPILOGUE = r"""
    ks_fence_regs<4>(lacc);
    const float lrow[2] = {1.f / lacc[0], 1.f / lacc[2]};
    // 16-byte stores: a quad's four lanes hold a row's 8 consecutive columns between them, 2 each; a transpose within
    // the quad gives each lane one 16-byte chunk of four, a quarter of the store instructions and of the requests to
    // L2 that 4-byte stores make (with those the epilogue took 1.3-2.2 tiles' time: prefill_item_trace.py).
    T* og = o + ((size_t)bhq * L + row_lo) * D + 8 * tq;
    // The shuffles run in every lane, outside any branch: a shuffle under a branch ptxas cannot prove warp-uniform
    // costs a persistent kernel's whole item loop its uniform datapath (its descriptors' arithmetic moved to the
    // vector registers: benchmarks/prefill_sass.py), so only the stores are guarded.
    #pragma unroll
    for (int r = 0; r < 2; ++r) {  // rows row_lo and row_lo + 8
      #pragma unroll
      for (int j4 = 0; j4 < D / 32; ++j4) {
        const float* a = oacc + 16 * j4 + 2 * r;  // columns 32 j4 + 8 jj + 2 tq, + 1 at a[4 jj], a[4 jj + 1]
        const uint4 c = ks_quad_transpose(
            ks_pack2<T>(a[0] * lrow[r], a[1] * lrow[r]), ks_pack2<T>(a[4] * lrow[r], a[5] * lrow[r]),
            ks_pack2<T>(a[8] * lrow[r], a[9] * lrow[r]), ks_pack2<T>(a[12] * lrow[r], a[13] * lrow[r]), tq);
        // a warpgroup past L (partial last block) computed on unloaded rows: nothing to store
        if (row_lo < L) *reinterpret_cast<uint4*>(og + 8 * r * D + 32 * j4) = c;
      }
    }
"""
# O through shared memory and one bulk copy a warpgroup (the producer kernels' `_ob`): the warpgroup's rows, 16 bytes
# a lane after the quad transpose, go row-major into its own Q rows (every product of the work item has completed,
# so nothing reads Q any more), and one thread copies the rows that exist to global memory asynchronously. The
# warpgroup waits only for that copy to have read shared memory (Q's rows are written again by the next item, and a
# block must not exit before), not for the global writes. Not with `_qn` (which loads the next Q under the epilogue).
EPILOGUE_BULK = r"""
    ks_fence_regs<4>(lacc);
    const float lrow[2] = {1.f / lacc[0], 1.f / lacc[2]};
    T* os = Qs + wg * 64 * D;
    #pragma unroll
    for (int r = 0; r < 2; ++r) {  // rows row_lo and row_lo + 8
      #pragma unroll
      for (int j4 = 0; j4 < D / 32; ++j4) {
        const float* a = oacc + 16 * j4 + 2 * r;
        *reinterpret_cast<uint4*>(os + (warp * 16 + g + 8 * r) * D + (4 * j4 + tq) * 8) = ks_quad_transpose(
            ks_pack2<T>(a[0] * lrow[r], a[1] * lrow[r]), ks_pack2<T>(a[4] * lrow[r], a[5] * lrow[r]),
            ks_pack2<T>(a[8] * lrow[r], a[9] * lrow[r]), ks_pack2<T>(a[12] * lrow[r], a[13] * lrow[r]), tq);
      }
    }
    ks_proxy_fence();  // the rows, written through the generic proxy, visible to the bulk copy's async proxy
    asm volatile("bar.sync %0, 128;\n" :: "r"(1 + wg) : "memory");
    if (wt == 0 && rows_here > wg * 64) {  // rows past L (a partial last block) were computed on unloaded Q: not copied
      ks_bulk_store(o + ((size_t)bhq * L + m0 + wg * 64) * D, os, min(64, rows_here - wg * 64) * D * (int)sizeof(T));
      ks_bulk_wait_read();
    }
    asm volatile("bar.sync %0, 128;\n" :: "r"(1 + wg) : "memory");
"""
# The same epilogue storing 4 bytes a lane straight from the accumulator layout (the producer kernels' `_st4`):
# kept selectable to compare against.
EPILOGUE_STORE4 = r"""
    ks_fence_regs<4>(lacc);
    const float lrow[2] = {1.f / lacc[0], 1.f / lacc[2]};
    T* og = o + ((size_t)bhq * L + row_lo) * D + 2 * tq;
    if (row_lo < L) {  // a warpgroup past L (partial last block) computed on unloaded rows: nothing to store
      #pragma unroll
      for (int j = 0; j < D / 8; ++j) {
        *reinterpret_cast<unsigned*>(og + j * 8) = ks_pack2<T>(oacc[4 * j] * lrow[0], oacc[4 * j + 1] * lrow[0]);
        *reinterpret_cast<unsigned*>(og + 8 * D + j * 8) =
            ks_pack2<T>(oacc[4 * j + 2] * lrow[1], oacc[4 * j + 3] * lrow[1]);
      }
    }
"""

def _step(cur: int, step: str, after_s: str, after_pv: str, issued: str = "") -> str:
    """Step t of the main loop; P(t-1) is in pa[cur], P(t) goes to the other buffer."""
    nxt = 1 - cur
    return f"""
      {step}
      ks_fence_regs<BN / 2>(s);
      ks_wg_fence();
      issue_s(t);
      rescale();
      ks_fence_regs<D / 2>(oacc);
      ks_fence_u<BN / 4>(&pa[{cur}][0][0]);
      ks_wg_fence();
      issue_pv(t - 1, pa[{cur}]);{issued}
      ks_wg_wait1();
      ks_fence_regs<BN / 2>(s);
      {after_s}
      softmax(t);
      pack_p(pa[{nxt}]);
      issue_sum(pa[{nxt}]);  // after the whole softmax, and the wait below stays after it
      ks_wg_wait0();
      ks_fence_regs<4>(lacc);
      ks_fence_regs<D / 2>(oacc);
      ks_fence_u<BN / 4>(&pa[{cur}][0][0]);
      {after_pv}"""


def pipeline(first: str, step: str, last: str, after_s0: str = "", after_s: str = "", after_pv: str = "",
             end: str = "", issued: str = "") -> str:
    """The main loop all three kernels share, with their own hand-over code spliced in: `first` before tile 0's S,
    `after_s0` once S(0) is done, `step` at the top of step t, `after_s` once S(t) is done, `after_pv` once
    P(t-1) V(t-1) is, `last` before the final P V and `end` after it; `issued` right after each group of products
    is issued (S(0); S(t) and P(t-1) V(t-1); the last P V), before any wait: it must not branch.

    FA-3's order: step t issues S(t), rescales O by tile t-1's corr while S(t) is on the tensor cores, issues
    O += P(t-1) V(t-1), and runs tile t's softmax while that product is in flight. P is double-buffered (the loop
    is unrolled by two so that both buffers stay in registers): with one buffer, packing P(t) must wait for the
    product reading P(t-1), and ptxas hoisted that wait above the softmax's exponentials, so nothing overlapped
    (seen in the SASS; likewise with the rescale after the wait). No branch separates a wgmma from its wait: ptxas
    serialises every wgmma of a kernel where it cannot prove the accumulators idle."""
    ind = "\n      "
    body = [_step(c, step.replace(chr(10), ind), after_s, after_pv.replace(chr(10), ind),
                  ind + issued if issued else "") for c in (0, 1)]
    iss = "\n    " + issued if issued else ""
    return f"""
    {first.replace(chr(10), chr(10) + "    ")}
    ks_fence_regs<BN / 2>(s);
    ks_wg_fence();
    issue_s(0);{iss}
    ks_wg_wait0();
    ks_fence_regs<BN / 2>(s);
    {after_s0}
    softmax(0);
    pack_p(pa[0]);
    issue_sum(pa[0]);
    ks_wg_wait0();
    ks_fence_regs<4>(lacc);
    for (int t0 = 1; t0 < ntiles; t0 += 2) {{
      {{
      const int t = t0;{body[0]}
      }}
      if (t0 + 1 < ntiles) {{  // every wgmma of the first step has completed: this branch is safe
      const int t = t0 + 1;{body[1]}
      }}
    }}
    if (ntiles % 2 == 0) {{  // P of the last tile is in pa[1]
      #pragma unroll
      for (int i = 0; i < BN / 16; ++i) {{
        #pragma unroll
        for (int j = 0; j < 4; ++j) pa[0][i][j] = pa[1][i][j];
      }}
    }}
    {last}
    rescale();
    ks_fence_regs<D / 2>(oacc);
    ks_fence_u<BN / 4>(&pa[0][0][0]);
    ks_wg_fence();
    issue_pv(ntiles - 1, pa[0]);{iss}
    ks_wg_wait0();
    ks_fence_regs<D / 2>(oacc);
    {end}
"""


def source(stages: int = 2) -> str:
    """Every thread loads; a __syncthreads per tile hands the stages over. K runs stages - 1 tiles ahead of its
    S product, V stages - 2 ahead of its P V (loaded at step t: K(t + stages - 1), V(t + stages - 2)), each into the
    stage that S(t - 1) and P(t - 2) V(t - 2), both complete, are done with."""
    a = stages - 1
    prologue = "" if stages == 2 else r"""
    ks_load_core<D, NT, BN>(Ks + KB, kg + (size_t)BN * D, min(BN, max(0, S - BN)), threadIdx.x);
    ks_load_core<D, NT, BN>(Vs, vg, BN, threadIdx.x);
    ks_commit_w();
"""
    wait = f"ks_wait_w<{stages - 2}>();  // all but the newest {stages - 2} cp.async groups have landed"
    return f"    constexpr int STAGES = {stages};\n    constexpr int KV_LAYOUT = 0;" + SETUP + r"""
    ks_load_core<D, NT, BM>(Qs, qg, rows_here, threadIdx.x);  // rows past L: never stored
    ks_load_core<D, NT, BN>(Ks, kg, BN, threadIdx.x);
    ks_commit_w();
""" + prologue + REGISTERS + f"""
    auto next_loads = [&](int t) {{
      {wait}
      ks_proxy_fence();
      __syncthreads();
      if (t + {a} < ntiles)
        ks_load_core<D, NT, BN>(Ks + ((t + {a}) % STAGES) * KB, kg + (size_t)(t + {a}) * BN * D, BN, threadIdx.x);
      if (t + {a - 1} < ntiles)
        ks_load_core<D, NT, BN>(Vs + ((t + {a - 1}) % STAGES) * KB, vg + (size_t)(t + {a - 1}) * BN * D, BN, threadIdx.x);
      ks_commit_w();
    }};
""" + STEPS + pipeline(first="next_loads(0);", step="next_loads(t);", last="next_loads(ntiles);") + EPILOGUE


SOURCE = source(2)


def cp_cache(mode: str) -> tuple[str, str]:
    """(header text, kernel-name suffix) for the cp.async cache mode: "cg" (the default, L2 only) or "ca" (L1 too).
    Nsight Compute counted twice the ideal L2 sectors for our 16-byte "cg" copies; "ca" lets L1 merge them."""
    if mode not in ("cg", "ca"):
        raise ValueError(f"cp.async cache mode {mode!r}: use cg or ca")
    return ("", "") if mode == "cg" else ('#define KS_CP_CACHE "ca"\n', "_ca")


def launch_bounds(threads: int, min_blocks: int = 1) -> str:
    """Header text that gives the kernel MLX generates after it `__launch_bounds__(threads, min_blocks)` (MLX writes
    the `__global__` line, so the qualifier is redefined). Without it ptxas takes registers freely (the causal kernel
    of 3 warpgroups took 178 a thread in one version of the kernel, 3 x 128 took 206), and 384 threads of that exceed
    the register file, so the launch fails. With it ptxas keeps to 65536 / (threads x min_blocks); it also gives
    setmaxnreg (wgmma_ws.py) the register count at entry that it needs."""
    return (f"\n#undef __global__\n"
            f"#define __global__ __attribute__((global)) __attribute__((launch_bounds({threads}, {min_blocks})))\n")


# Shared memory a block may take on Hopper (227 KB); mx.fast.cuda_kernel raises the kernel's limit to what it asks.
MAX_SMEM = 227 * 1024
# Shared memory an SM holds for all its blocks on Hopper (each block also takes 1 KB the system reserves).
SM_SMEM = 228 * 1024


@dataclass(frozen=True)
class WgmmaConfig:
    wg: int = 3      # warpgroups per block (64 query rows each): they share every K/V tile
    bn: int = 64     # keys per K/V tile: the S product is m64n{bn}k16
    stages: int = 2  # K / V stages in shared memory (2 or 3)
    cp: str = "cg"   # cp.async cache mode (cp_cache)

    def smem_bytes(self, d: int) -> int:
        return 256 + (64 * self.wg + 2 * self.stages * self.bn) * d * 2  # ones (P's row sums), Q, K and V stages


def fits_registers(cfg: WgmmaConfig, d: int) -> bool:
    """Whether a thread's registers fit 65536 / threads without spilling: O (d / 2), S (bn / 2), two P buffers
    (bn / 4 each) and about 40 more, against ptxas's counts (3 warpgroups: 158-168 at d=128, bn=64; 3 x 128 spills
    over 500 bytes under the launch bound, and without it took 206 registers and failed to launch)."""
    return d // 2 + cfg.bn // 2 + cfg.bn // 2 + 40 <= 65536 // (128 * cfg.wg) // 8 * 8


def supports(q: Any, k: Any, v: Any, causal: bool, cfg: WgmmaConfig) -> bool:
    # fits() bounds shared memory by the mma.sync kernel's checked 100 KB; wgmma's bound is its own. L need only be a
    # multiple of one warpgroup's 64 rows: the last block may be partial.
    return (cfg.stages in (2, 3) and cfg.smem_bytes(q.shape[-1]) <= MAX_SMEM and fits_registers(cfg, q.shape[-1])
            and fits(q, k, v, causal, 64, cfg.bn, 0))


def attention_wgmma(q: Any, k: Any, v: Any, causal: bool = False, cfg: WgmmaConfig | None = None) -> Any:
    return launch(_launch(tuple(q.shape), q.dtype, bool(causal), cfg or WgmmaConfig()), q, k, v)


@lru_cache(maxsize=1024)
def _launch(q_shape: tuple[int, ...], dtype: Any, causal: bool, cfg: WgmmaConfig) -> tuple[Any, dict[str, Any]]:
    """The kernel, its template arguments as constants, and its launch, once per shape (cuda_prefill.shape_launch)."""
    pre, tag = cp_cache(cfg.cp)
    suffix = ("" if cfg.stages == 2 else f"_s{cfg.stages}") + tag
    return shape_launch(f"ks_flash_wgmma_wg{cfg.wg}_n{cfg.bn}{suffix}", source(cfg.stages),
                        pre + WGMMA_HEADER + launch_bounds(128 * cfg.wg), cfg.smem_bytes(q_shape[-1]), q_shape, dtype,
                        64 * cfg.wg, 128 * cfg.wg, [("WG", cfg.wg), ("BN", cfg.bn), ("CAUSAL", causal)])
