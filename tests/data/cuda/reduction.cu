// Row sum: one block per row, a shared-memory tree, then a warp-shuffle tail. Written for the analyzer tests.
#include <cuda_runtime.h>

__global__ void row_sum(const float* __restrict__ x, float* __restrict__ out, int cols) {
  __shared__ float buf[256];
  int row = blockIdx.x;
  float s = 0.f;
  for (int c = threadIdx.x; c < cols; c += blockDim.x) s += __ldg(&x[(size_t)row * cols + c]);
  buf[threadIdx.x] = s;
  __syncthreads();
  for (int stride = blockDim.x / 2; stride > 32; stride >>= 1) {
    if (threadIdx.x < stride) buf[threadIdx.x] += buf[threadIdx.x + stride];
    __syncthreads();
  }
  if (threadIdx.x < 32) {
    float v = buf[threadIdx.x] + buf[threadIdx.x + 32];
    for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(0xffffffff, v, o);
    if (threadIdx.x == 0) atomicAdd(&out[row], v);
  }
}

void launch(const float* x, float* out, int rows, int cols, cudaStream_t stream) {
  cudaMemset(out, 0, rows * sizeof(float));
  row_sum<<<rows, 256, 0, stream>>>(x, out, cols);
}
