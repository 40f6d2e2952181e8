// Tiled matmul with two shared buffers: the next tile's global loads are issued before the current tile's
// math and stored into the other buffer afterwards, so one barrier per step suffices and loads overlap compute.
// (On sm_80+ the same structure works with cp.async + commit/wait groups.)
__shared__ float As[2][TILE][TILE + 1];
__shared__ float Bs[2][TILE][TILE + 1];
int M = a_shape[0], K = a_shape[1], N = b_shape[1];
int tx = threadIdx.x, ty = threadIdx.y;
int row = blockIdx.y * TILE + ty, col = blockIdx.x * TILE + tx;
int nt = (K + TILE - 1) / TILE;
As[0][ty][tx] = (row < M && tx < K) ? (float)a[(size_t)row * K + tx] : 0.f;
Bs[0][ty][tx] = (ty < K && col < N) ? (float)b[(size_t)ty * N + col] : 0.f;
__syncthreads();
float acc = 0.f;
for (int t = 0; t < nt; ++t) {
  int cur = t & 1;
  float na = 0.f, nb = 0.f;
  if (t + 1 < nt) {
    int k1 = (t + 1) * TILE;
    na = (row < M && k1 + tx < K) ? (float)a[(size_t)row * K + k1 + tx] : 0.f;
    nb = (k1 + ty < K && col < N) ? (float)b[(size_t)(k1 + ty) * N + col] : 0.f;
  }
#pragma unroll
  for (int kk = 0; kk < TILE; ++kk) acc += As[cur][ty][kk] * Bs[cur][kk][tx];
  if (t + 1 < nt) { As[cur ^ 1][ty][tx] = na; Bs[cur ^ 1][ty][tx] = nb; }
  __syncthreads();
}
if (row < M && col < N) c[(size_t)row * N + col] = (T)acc;
