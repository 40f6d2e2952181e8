// ITEMS independent accumulators per thread, unrolled (compile-time trip count from the template).
uint row = threadgroup_position_in_grid.x;
int tid = (int)thread_position_in_threadgroup.x;
uint lane = thread_index_in_simdgroup;
uint warp = simdgroup_index_in_threadgroup;
int cols = x_shape[1];
float acc[ITEMS];
#pragma unroll
for (int u = 0; u < ITEMS; ++u) acc[u] = 0.0f;
for (int base = tid; base < cols; base += TPB * ITEMS) {
#pragma unroll
  for (int u = 0; u < ITEMS; ++u) {
    int c = base + u * TPB;
    if (c < cols) acc[u] += (float)x[row * cols + c];
  }
}
float s = 0.0f;
#pragma unroll
for (int u = 0; u < ITEMS; ++u) s += acc[u];
s = simd_sum(s);
threadgroup float part[32];
if (lane == 0) part[warp] = s;
threadgroup_barrier(mem_flags::mem_threadgroup);
if (warp == 0) {
  s = lane < TPB / 32 ? part[lane] : 0.0f;
  s = simd_sum(s);
  if (lane == 0) out[row] = (T)s;
}
