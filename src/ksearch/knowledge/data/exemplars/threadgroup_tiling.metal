// C = A @ B with TILE x TILE tiles in threadgroup memory (padded rows), zeros at the edges.
threadgroup float As[TILE][TILE + 1];
threadgroup float Bs[TILE][TILE + 1];
int M = a_shape[0], K = a_shape[1], N = b_shape[1];
int tx = (int)thread_position_in_threadgroup.x, ty = (int)thread_position_in_threadgroup.y;
int row = (int)threadgroup_position_in_grid.y * TILE + ty;
int col = (int)threadgroup_position_in_grid.x * TILE + tx;
float acc = 0.0f;
for (int k0 = 0; k0 < K; k0 += TILE) {
  As[ty][tx] = (row < M && k0 + tx < K) ? (float)a[(size_t)row * K + k0 + tx] : 0.0f;
  Bs[ty][tx] = (k0 + ty < K && col < N) ? (float)b[(size_t)(k0 + ty) * N + col] : 0.0f;
  threadgroup_barrier(mem_flags::mem_threadgroup);
#pragma unroll
  for (int kk = 0; kk < TILE; ++kk) acc += As[ty][kk] * Bs[kk][tx];
  threadgroup_barrier(mem_flags::mem_threadgroup);
}
if (row < M && col < N) c[(size_t)row * N + col] = (T)acc;
