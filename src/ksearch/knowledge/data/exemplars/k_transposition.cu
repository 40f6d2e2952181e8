// Scores S = Q K^T. The K tile is read along D (coalesced) and stored TRANSPOSED in shared memory, so the inner
// product reads Kt[d][tx]: consecutive threads hit consecutive banks instead of a stride of D floats.
__shared__ float Qs[TILE][TILE + 1];
__shared__ float Kt[TILE][TILE + 1];
int M = q_shape[0], D = q_shape[1], N = k_shape[0];
int tx = threadIdx.x, ty = threadIdx.y;
int i = blockIdx.y * TILE + ty, j0 = blockIdx.x * TILE, j = j0 + tx;
float acc = 0.f;
for (int d0 = 0; d0 < D; d0 += TILE) {
  Qs[ty][tx] = (i < M && d0 + tx < D) ? (float)q[(size_t)i * D + d0 + tx] : 0.f;
  Kt[tx][ty] = (j0 + ty < N && d0 + tx < D) ? (float)k[(size_t)(j0 + ty) * D + d0 + tx] : 0.f;
  __syncthreads();
#pragma unroll
  for (int dd = 0; dd < TILE; ++dd) acc += Qs[ty][dd] * Kt[dd][tx];
  __syncthreads();
}
if (i < M && j < N) scores[(size_t)i * N + j] = (T)acc;
