// 4-wide vector loads (float4 / half4) from device memory when the row start is aligned (cols % 4 == 0),
// a scalar tail, simd_sum for the reduction.
uint row = threadgroup_position_in_grid.x;
int tid = (int)thread_position_in_threadgroup.x;
uint lane = thread_index_in_simdgroup;
uint warp = simdgroup_index_in_threadgroup;
int cols = x_shape[1];
int vec_end = (cols % 4 == 0) ? cols : 0;
const device vec<T, 4>* xv = (const device vec<T, 4>*)(x + row * cols);
float4 acc = 0.0f;
for (int c = tid; c < vec_end / 4; c += TPB) acc += float4(xv[c]);
float s = (acc.x + acc.y) + (acc.z + acc.w);
for (int c = vec_end + tid; c < cols; c += TPB) s += (float)x[row * cols + c];
s = simd_sum(s);
threadgroup float part[32];
if (lane == 0) part[warp] = s;
threadgroup_barrier(mem_flags::mem_threadgroup);
if (warp == 0) {
  s = lane < TPB / 32 ? part[lane] : 0.0f;
  s = simd_sum(s);
  if (lane == 0) out[row] = (T)s;
}
