// RMSNorm: rsqrt, weight multiply and cast fused into the store of the reduction kernel.
uint row = threadgroup_position_in_grid.x;
int tid = (int)thread_position_in_threadgroup.x;
uint lane = thread_index_in_simdgroup;
uint warp = simdgroup_index_in_threadgroup;
int cols = x_shape[1];
float ss = 0.0f;
for (int c = tid; c < cols; c += TPB) { float v = (float)x[row * cols + c]; ss += v * v; }
ss = simd_sum(ss);
threadgroup float part[32];
if (lane == 0) part[warp] = ss;
threadgroup_barrier(mem_flags::mem_threadgroup);
ss = 0.0f;
for (int i = 0; i < TPB / 32; ++i) ss += part[i];
float r = metal::rsqrt(ss / cols + 1e-5f);
for (int c = tid; c < cols; c += TPB) out[row * cols + c] = (T)((float)x[row * cols + c] * r * (float)w[c]);
