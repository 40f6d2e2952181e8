// Register-prefetch double buffering: load tile t+1 into registers, compute on tile t, store t+1 into the
// other threadgroup buffer, one barrier per step. (Apple GPUs overlap loads and math without async copies.)
threadgroup float As[2][TILE][TILE + 1];
threadgroup float Bs[2][TILE][TILE + 1];
int M = a_shape[0], K = a_shape[1], N = b_shape[1];
int tx = (int)thread_position_in_threadgroup.x, ty = (int)thread_position_in_threadgroup.y;
int row = (int)threadgroup_position_in_grid.y * TILE + ty;
int col = (int)threadgroup_position_in_grid.x * TILE + tx;
int nt = (K + TILE - 1) / TILE;
As[0][ty][tx] = (row < M && tx < K) ? (float)a[(size_t)row * K + tx] : 0.0f;
Bs[0][ty][tx] = (ty < K && col < N) ? (float)b[(size_t)ty * N + col] : 0.0f;
threadgroup_barrier(mem_flags::mem_threadgroup);
float acc = 0.0f;
for (int t = 0; t < nt; ++t) {
  int cur = t & 1;
  float na = 0.0f, nb = 0.0f;
  if (t + 1 < nt) {
    int k1 = (t + 1) * TILE;
    na = (row < M && k1 + tx < K) ? (float)a[(size_t)row * K + k1 + tx] : 0.0f;
    nb = (k1 + ty < K && col < N) ? (float)b[(size_t)(k1 + ty) * N + col] : 0.0f;
  }
  for (int kk = 0; kk < TILE; ++kk) acc += As[cur][ty][kk] * Bs[cur][kk][tx];
  if (t + 1 < nt) { As[cur ^ 1][ty][tx] = na; Bs[cur ^ 1][ty][tx] = nb; }
  threadgroup_barrier(mem_flags::mem_threadgroup);
}
if (row < M && col < N) c[(size_t)row * N + col] = (T)acc;
