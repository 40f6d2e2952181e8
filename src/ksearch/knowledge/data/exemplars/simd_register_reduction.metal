// One threadgroup per row: strided partial sums, simd_sum inside each SIMD-group, partials through threadgroup memory.
uint row = threadgroup_position_in_grid.x;
int tid = (int)thread_position_in_threadgroup.x;
uint lane = thread_index_in_simdgroup;
uint warp = simdgroup_index_in_threadgroup;
int cols = x_shape[1];
float s = 0.0f;
for (int c = tid; c < cols; c += TPB) s += (float)x[row * cols + c];
s = simd_sum(s);
threadgroup float part[32];
if (lane == 0) part[warp] = s;
threadgroup_barrier(mem_flags::mem_threadgroup);
if (warp == 0) {
  s = lane < TPB / 32 ? part[lane] : 0.0f;
  s = simd_sum(s);
  if (lane == 0) out[row] = (T)s;
}
