// Online softmax: one read pass with a running (max, sum) per thread, merged across the SIMD-group with
// simd_shuffle_xor and across SIMD-groups through threadgroup memory; a second pass writes.
uint row = threadgroup_position_in_grid.x;
int tid = (int)thread_position_in_threadgroup.x;
uint lane = thread_index_in_simdgroup;
uint warp = simdgroup_index_in_threadgroup;
int cols = x_shape[1];
float m = -INFINITY, l = 0.0f;
for (int c = tid; c < cols; c += TPB) {
  float v = (float)x[row * cols + c];
  float m_new = metal::max(m, v);
  l = l * metal::exp(m - m_new) + metal::exp(v - m_new);
  m = m_new;
}
for (ushort o = 16; o > 0; o >>= 1) {
  float m2 = simd_shuffle_xor(m, o), l2 = simd_shuffle_xor(l, o);
  float mm = metal::max(m, m2);
  l = (metal::isinf(m) ? 0.0f : l * metal::exp(m - mm)) + (metal::isinf(m2) ? 0.0f : l2 * metal::exp(m2 - mm));
  m = mm;
}
threadgroup float sm[32], sl[32];
if (lane == 0) { sm[warp] = m; sl[warp] = l; }
threadgroup_barrier(mem_flags::mem_threadgroup);
m = sm[0];
for (int w = 1; w < TPB / 32; ++w) m = metal::max(m, sm[w]);
l = 0.0f;
for (int w = 0; w < TPB / 32; ++w) l += metal::isinf(sm[w]) ? 0.0f : sl[w] * metal::exp(sm[w] - m);
float inv = 1.0f / l;
for (int c = tid; c < cols; c += TPB) out[row * cols + c] = (T)(metal::exp((float)x[row * cols + c] - m) * inv);
