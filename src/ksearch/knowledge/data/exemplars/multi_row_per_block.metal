// One SIMD-group per row, TPB/32 rows per threadgroup: no threadgroup memory, no barrier.
uint warp = simdgroup_index_in_threadgroup;
uint lane = thread_index_in_simdgroup;
int row = (int)(threadgroup_position_in_grid.x * (TPB / 32) + warp);
int rows = x_shape[0], cols = x_shape[1];
if (row >= rows) return;
float s = 0.0f;
for (int c = (int)lane; c < cols; c += 32) s += (float)x[row * cols + c];
s = simd_sum(s);
if (lane == 0) out[row] = (T)s;
