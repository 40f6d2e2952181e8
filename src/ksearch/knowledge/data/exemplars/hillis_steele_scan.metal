// Hillis-Steele inclusive scan of (a, b) pairs in threadgroup memory (double-buffered), chunk carry between chunks.
int row = (int)threadgroup_position_in_grid.x;
int tid = (int)thread_position_in_threadgroup.x;
int L = a_shape[1];
size_t base = (size_t)row * L;
threadgroup float sa[2][TPB], sb[2][TPB];
threadgroup float carry[1];
if (tid == 0) carry[0] = 0.0f;
for (int c0 = 0; c0 < L; c0 += TPB) {
  int t = c0 + tid;
  sa[0][tid] = t < L ? (float)a[base + t] : 1.0f;
  sb[0][tid] = t < L ? (float)b[base + t] : 0.0f;
  threadgroup_barrier(mem_flags::mem_threadgroup);
  int src = 0;
  for (int o = 1; o < TPB; o <<= 1) {
    float a2 = sa[src][tid], b2 = sb[src][tid];
    if (tid >= o) {
      float a1 = sa[src][tid - o], b1 = sb[src][tid - o];
      b2 = a2 * b1 + b2;
      a2 = a2 * a1;
    }
    sa[src ^ 1][tid] = a2;
    sb[src ^ 1][tid] = b2;
    src ^= 1;
    threadgroup_barrier(mem_flags::mem_threadgroup);
  }
  float hv = sa[src][tid] * carry[0] + sb[src][tid];
  if (t < L) h[base + t] = (T)hv;
  threadgroup_barrier(mem_flags::mem_threadgroup);
  if (tid == TPB - 1) carry[0] = hv;
}
