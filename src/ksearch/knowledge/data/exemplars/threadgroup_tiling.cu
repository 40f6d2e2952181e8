// C = A @ B with TILE x TILE tiles staged in shared memory: each element loaded from global memory once per
// block instead of once per thread. Rows padded by one float (no bank conflicts); edges load zeros.
__shared__ float As[TILE][TILE + 1];
__shared__ float Bs[TILE][TILE + 1];
int M = a_shape[0], K = a_shape[1], N = b_shape[1];
int tx = threadIdx.x, ty = threadIdx.y;
int row = blockIdx.y * TILE + ty, col = blockIdx.x * TILE + tx;
float acc = 0.f;
for (int k0 = 0; k0 < K; k0 += TILE) {
  As[ty][tx] = (row < M && k0 + tx < K) ? (float)a[(size_t)row * K + k0 + tx] : 0.f;
  Bs[ty][tx] = (k0 + ty < K && col < N) ? (float)b[(size_t)(k0 + ty) * N + col] : 0.f;
  __syncthreads();
#pragma unroll
  for (int kk = 0; kk < TILE; ++kk) acc += As[ty][kk] * Bs[kk][tx];
  __syncthreads();
}
if (row < M && col < N) c[(size_t)row * N + col] = (T)acc;
