// Scores S = Q K^T with the K tile stored transposed in threadgroup memory (Kt[d][j]).
threadgroup float Qs[TILE][TILE + 1];
threadgroup float Kt[TILE][TILE + 1];
int M = q_shape[0], D = q_shape[1], N = k_shape[0];
int tx = (int)thread_position_in_threadgroup.x, ty = (int)thread_position_in_threadgroup.y;
int i = (int)threadgroup_position_in_grid.y * TILE + ty;
int j0 = (int)threadgroup_position_in_grid.x * TILE, j = j0 + tx;
float acc = 0.0f;
for (int d0 = 0; d0 < D; d0 += TILE) {
  Qs[ty][tx] = (i < M && d0 + tx < D) ? (float)q[(size_t)i * D + d0 + tx] : 0.0f;
  Kt[tx][ty] = (j0 + ty < N && d0 + tx < D) ? (float)k[(size_t)(j0 + ty) * D + d0 + tx] : 0.0f;
  threadgroup_barrier(mem_flags::mem_threadgroup);
  for (int dd = 0; dd < TILE; ++dd) acc += Qs[ty][dd] * Kt[dd][tx];
  threadgroup_barrier(mem_flags::mem_threadgroup);
}
if (i < M && j < N) scores[(size_t)i * N + j] = (T)acc;
