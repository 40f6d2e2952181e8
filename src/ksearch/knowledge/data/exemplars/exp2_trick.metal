// Softmax in log2 units: scores scaled by log2(e) once; fast::exp2 is the native instruction.
uint row = threadgroup_position_in_grid.x;
int tid = (int)thread_position_in_threadgroup.x;
uint lane = thread_index_in_simdgroup;
uint warp = simdgroup_index_in_threadgroup;
int cols = x_shape[1];
const float LOG2E = 1.4426950408889634f;
threadgroup float red[32];
float m = -INFINITY;
for (int c = tid; c < cols; c += TPB) m = metal::max(m, (float)x[row * cols + c] * LOG2E);
m = simd_max(m);
if (lane == 0) red[warp] = m;
threadgroup_barrier(mem_flags::mem_threadgroup);
m = red[0];
for (int w = 1; w < TPB / 32; ++w) m = metal::max(m, red[w]);
threadgroup_barrier(mem_flags::mem_threadgroup);
float s = 0.0f;
for (int c = tid; c < cols; c += TPB) s += metal::fast::exp2(metal::fma((float)x[row * cols + c], LOG2E, -m));
s = simd_sum(s);
if (lane == 0) red[warp] = s;
threadgroup_barrier(mem_flags::mem_threadgroup);
s = 0.0f;
for (int w = 0; w < TPB / 32; ++w) s += red[w];
float inv = 1.0f / s;
for (int c = tid; c < cols; c += TPB)
  out[row * cols + c] = (T)(metal::fast::exp2(metal::fma((float)x[row * cols + c], LOG2E, -m)) * inv);
