"""Inline-PTX device helpers that several CUDA kernels put in their `header=` text (MLX-CUDA, `mx.fast.cuda_kernel`).

MMA_SYNC_HEADER: `mma.sync` m16n8k16 for fp16 / bf16, `ldmatrix` (plain and transposed), 16-byte `cp.async` and a
swizzled tile load; the mma.sync prefill (attention/mma_sync.py) and the tensor-core decode (decode/cuda_cluster.py) use it.
WGMMA_HEADER: Hopper's `wgmma` (shared-memory and register A operands), register and proxy fences, mbarriers,
`cp.async` into the core-matrix layout that wgmma descriptors describe; the wgmma prefills (attention/wgmma.py,
attention/wgmma_ws.py) use it.
MBARRIER_HEADER: the mbarrier helpers alone (WGMMA_HEADER holds them too), for the tensor-core decode
(decode/cuda_cluster.py): MLX copies a kernel's whole text on every call, and WGMMA_HEADER is 18 KB of it.
All three are include-guarded: a checker may compile several kernels of one candidate in one translation unit.
"""

from __future__ import annotations

MMA_SYNC_HEADER = r"""
// Guarded: a checker may compile several kernels of one candidate in one translation unit.
#ifndef KS_FLASH_HEADER
#define KS_FLASH_HEADER
template <typename T> struct KsMma;
template <> struct KsMma<__half> {
  static __device__ __forceinline__ void mma(float* c, const unsigned* a, unsigned b0, unsigned b1) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                 "{%0,%1,%2,%3};\n" : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
  static __device__ __forceinline__ unsigned pack(float x, float y) {
    __half2 h = __floats2half2_rn(x, y); return *reinterpret_cast<unsigned*>(&h);
  }
};
template <> struct KsMma<__nv_bfloat16> {
  static __device__ __forceinline__ void mma(float* c, const unsigned* a, unsigned b0, unsigned b1) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                 "{%0,%1,%2,%3};\n" : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
  static __device__ __forceinline__ unsigned pack(float x, float y) {
    __nv_bfloat162 h = __floats2bfloat162_rn(x, y); return *reinterpret_cast<unsigned*>(&h);
  }
};
__device__ __forceinline__ void ks_cp16(void* smem, const void* gmem) {
  unsigned s = (unsigned)__cvta_generic_to_shared(smem);
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" :: "r"(s), "l"(gmem));
}
__device__ __forceinline__ void ks_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N> __device__ __forceinline__ void ks_wait() { asm volatile("cp.async.wait_group %0;\n" :: "n"(N)); }
__device__ __forceinline__ void ks_ldsm4(unsigned* r, const void* p) {
  unsigned s = (unsigned)__cvta_generic_to_shared(p);
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(s));
}
__device__ __forceinline__ void ks_ldsm4t(unsigned* r, const void* p) {
  unsigned s = (unsigned)__cvta_generic_to_shared(p);
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(s));
}
// Swizzled element offset of (row, 16-byte chunk c) in a tile whose rows hold D 16-bit values.
template <int D> __device__ __forceinline__ int ks_sw(int row, int c) { return row * D + ((c ^ (row & 7)) << 3); }
// rows x D tile, rows contiguous in global memory, into swizzled shared memory; NT threads cooperate.
template <int D, int NT, typename T>
__device__ __forceinline__ void ks_load_tile(T* sm, const T* g, int rows) {
  constexpr int CPR = D / 8;
  for (int i = threadIdx.x; i < rows * CPR; i += NT) {
    int r = i / CPR, c = i % CPR;
    ks_cp16(sm + ks_sw<D>(r, c), g + (size_t)r * D + c * 8);
  }
}
#endif
"""


def _wgmma_funcs(ctype: str, ptx: str) -> str:
    """Inline-PTX wrappers, N = 64 or 128: SS (both operands from shared memory) and RS (A from registers). ss{N}z
    starts a product (scale-d 0) and declares its accumulators outputs only: were they inputs too, the registers the
    softmax wrote would feed a wgmma, and ptxas would keep that softmax from overlapping the P V product in flight."""
    out = [f"template <> struct KsWg<{ctype}> {{"]
    for n in (64, 128):
        regs = n // 2
        dl = ",".join(f"%{i}" for i in range(regs))
        a = ",".join(f"%{regs + i}" for i in range(4))
        for name, con, scale_d in ((f"ss{n}z", "=f", "0"), (f"ss{n}", "+f", "1")):
            cons = ", ".join(f'"{con}"(d[{i}])' for i in range(regs))
            out.append(f"""
  static __device__ __forceinline__ void {name}(float* d, unsigned long long da, unsigned long long db) {{
    asm volatile("wgmma.mma_async.sync.aligned.m64n{n}k16.f32.{ptx}.{ptx} {{{dl}}}, %{regs}, %{regs + 1}, {scale_d}, 1, 1, 0, 0;\\n"
                 : {cons} : "l"(da), "l"(db));
  }}""")
        cons = ", ".join(f'"+f"(d[{i}])' for i in range(regs))
        out.append(f"""
  template <int TB>
  static __device__ __forceinline__ void rs{n}(float* d, const unsigned* a, unsigned long long db) {{
    asm volatile("wgmma.mma_async.sync.aligned.m64n{n}k16.f32.{ptx}.{ptx} {{{dl}}}, {{{a}}}, %{regs + 4}, 1, 1, 1, %{regs + 5};\\n"
                 : {cons} : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "n"(TB));
  }}""")
    # m64n8k16 with A from registers and a K-major B: P times a tile of ones, the row sums of P.
    out.append(f"""
  static __device__ __forceinline__ void rs8(float* d, const unsigned* a, unsigned long long db) {{
    asm volatile("wgmma.mma_async.sync.aligned.m64n8k16.f32.{ptx}.{ptx} {{%0,%1,%2,%3}}, {{%4,%5,%6,%7}}, %8, 1, 1, 1, 0;\\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db));
  }}""")
    out.append("};")
    return "\n".join(out)




MBARRIER_HEADER = r"""
#ifndef KS_MBAR_HEADER
#define KS_MBAR_HEADER
// mbarriers (shared memory, 8 bytes each) for the warp-specialised prefill (attention/wgmma_ws.py) and the
// tensor-core decode (decode/cuda_cluster.py), which needs these and none of the rest of WGMMA_HEADER.
__device__ __forceinline__ unsigned ks_saddr(const void* p) { return (unsigned)__cvta_generic_to_shared(p); }
__device__ __forceinline__ void ks_mbar_init(unsigned long long* b, unsigned count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" :: "r"(ks_saddr(b)), "r"(count) : "memory");
}
__device__ __forceinline__ void ks_mbar_arrive(unsigned long long* b) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" :: "r"(ks_saddr(b)) : "memory");
}
// One arrival on b once every cp.async this thread has issued so far has landed.
__device__ __forceinline__ void ks_cp_mbar_arrive(unsigned long long* b) {
  asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];\n" :: "r"(ks_saddr(b)) : "memory");
}
__device__ __forceinline__ void ks_mbar_wait(unsigned long long* b, int parity) {
  asm volatile("{\n.reg .pred P1;\nKS_WAIT:\nmbarrier.try_wait.parity.shared::cta.b64 P1, [%0], %1;\n"
               "@P1 bra KS_DONE;\nbra KS_WAIT;\nKS_DONE:\n}\n" :: "r"(ks_saddr(b)), "r"(parity) : "memory");
}
#endif
"""


WGMMA_HEADER = r"""
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
// A 4 x 4 transpose within a quad of lanes (tq = lane % 4): lane s holds w[0..3]; lane tq gets, in lane order, the
// w[tq] of lanes 0..3. Two butterfly stages of two shuffles (lane bit 0, then bit 1), each a select of what to send
// and of where the answer goes, so every index is static and nothing goes to local memory.
__device__ __forceinline__ uint4 ks_quad_transpose(unsigned w0, unsigned w1, unsigned w2, unsigned w3, int tq) {
  const bool b0 = tq & 1, b1 = tq & 2;
  // stage 1 (xor 1): the pair keeps the words whose index shares its lane's bit 0, in lane order
  unsigned s0 = __shfl_xor_sync(0xffffffffu, b0 ? w0 : w1, 1);
  unsigned s1 = __shfl_xor_sync(0xffffffffu, b0 ? w2 : w3, 1);
  const unsigned a0 = b0 ? s0 : w0, a1 = b0 ? w1 : s0, a2 = b0 ? s1 : w2, a3 = b0 ? w3 : s1;
  // now (a0, a1) is index (b0) of lanes (pair's even, odd), (a2, a3) index (2 + b0); stage 2 (xor 2) swaps halves
  unsigned t0 = __shfl_xor_sync(0xffffffffu, b1 ? a0 : a2, 2);
  unsigned t1 = __shfl_xor_sync(0xffffffffu, b1 ? a1 : a3, 2);
  return b1 ? make_uint4(t0, t1, a2, a3) : make_uint4(a0, a1, t0, t1);
}
// MUFU.EX2 alone (exp2f adds range fix-ups); ex2.approx(-inf) = +0, which masked scores rely on.
__device__ __forceinline__ float ks_exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
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
__device__ __forceinline__ void ks_wg_wait1() { asm volatile("wgmma.wait_group.sync.aligned 1;\n" ::: "memory"); }
// The same pin for a register A operand: keeps its registers live (not reused) until its wgmma has completed.
template <int N> __device__ __forceinline__ void ks_fence_u(unsigned* r) {
  #pragma unroll
  for (int i = 0; i < N; ++i) asm volatile("" : "+r"(r[i]) :: "memory");
}
// Shared-memory writes of the generic proxy (st.shared, cp.async) become visible to wgmma's async proxy.
__device__ __forceinline__ void ks_proxy_fence() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }
// KS_CP_CACHE: "cg" (L2 only) or "ca" (through L1, where a warp's 16-byte copies can share 32-byte sectors).
#ifndef KS_CP_CACHE
#define KS_CP_CACHE "cg"
#endif
__device__ __forceinline__ void ks_cp16w(void* smem, const void* gmem) {
  unsigned s = (unsigned)__cvta_generic_to_shared(smem);
  asm volatile("cp.async." KS_CP_CACHE ".shared.global [%0], [%1], 16;\n" :: "r"(s), "l"(gmem));
}
""" + MBARRIER_HEADER + r"""
// Shared -> global bulk copy (sm_90) of `bytes` contiguous bytes (a multiple of 16, both ends 16-byte aligned), in
// this thread's bulk group; the source must stay as it is until ks_bulk_wait_read() returns.
__device__ __forceinline__ void ks_bulk_store(void* g, const void* smem, unsigned bytes) {
  asm volatile("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;\n"
               :: "l"(g), "r"(ks_saddr(smem)), "r"(bytes) : "memory");
  asm volatile("cp.async.bulk.commit_group;\n" ::: "memory");
}
__device__ __forceinline__ void ks_bulk_wait_read() { asm volatile("cp.async.bulk.wait_group.read 0;\n" ::: "memory"); }
__device__ __forceinline__ void ks_commit_w() { asm volatile("cp.async.commit_group;\n" ::); }
// Wait until at most N of this thread's cp.async groups are pending (0: all have landed).
template <int N> __device__ __forceinline__ void ks_wait_w() { asm volatile("cp.async.wait_group %0;\n" :: "n"(N)); }
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
// rows x C tile (rows <= MAXROWS, both multiples of 8), rows contiguous in global memory (row stride C), into the
// core-matrix layout; NT threads, this one number tid among them. A warp copies 8 rows x 4 chunks of 16 bytes: lane
// l takes row l % 8 of chunk l / 8, so each quarter-warp writes one contiguous core matrix (128 bytes, every bank
// once) and each row reads 64 contiguous bytes of global memory. Consecutive lanes along a row instead put 16 lanes
// on the same 4 banks (a core matrix's rows are 16 bytes, its columns 128 bytes apart): Nsight Compute counted 56%
// excess shared-memory wavefronts. Where the warps cover whole row blocks (NW a multiple of the CPR / 4 chunk
// groups), copy j of a thread is its first plus j * RPI rows, in shared and global memory alike: one address
// computation for the unrolled copies.
template <int C, int NT, int MAXROWS, typename T>
__device__ __forceinline__ void ks_load_core(T* sm, const T* g, int rows, int tid) {
  constexpr int CPR = C / 8, CG = CPR / 4, NW = NT / 32;
  static_assert(CPR % 4 == 0 && MAXROWS % 8 == 0, "8-row blocks of 4-chunk groups");
  const int lane = tid & 31, w = tid >> 5;
  if (NW % CG == 0) {
    constexpr int RPI = 8 * (NW % CG == 0 ? NW / CG : 1), ITER = (MAXROWS + RPI - 1) / RPI;
    const int r0 = (w / CG) * 8 + (lane & 7), c = ((w % CG) * 4 + (lane >> 3)) * 8;
    T* s0 = sm + ks_core<C>(r0, c);
    const T* g0 = g + r0 * C + c;
    #pragma unroll
    for (int j = 0; j < ITER; ++j) {
      if (r0 + j * RPI < rows) ks_cp16w(s0 + j * RPI * C, g0 + j * RPI * C);
    }
  } else {
    for (int u = w; u < (MAXROWS / 8) * CG; u += NW) {
      const int r = (u / CG) * 8 + (lane & 7), c = ((u % CG) * 4 + (lane >> 3)) * 8;
      if (r < rows) ks_cp16w(sm + ks_core<C>(r, c), g + r * C + c);
    }
  }
}
#endif
"""
