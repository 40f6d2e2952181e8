// Blelloch exclusive scan of (a, b) pairs over 2*TPB elements per chunk in threadgroup memory, then the
// inclusive fix-up (element o prefix) and the carry into the next chunk.
constexpr int N = 2 * TPB;
int row = (int)threadgroup_position_in_grid.x;
int tid = (int)thread_position_in_threadgroup.x;
int L = a_shape[1];
size_t base = (size_t)row * L;
threadgroup float sa[N], sb[N];
threadgroup float carry[1];
if (tid == 0) carry[0] = 0.0f;
for (int c0 = 0; c0 < L; c0 += N) {
  float oa[2], ob[2];
  for (int u = 0; u < 2; ++u) {
    int e = tid + u * TPB, t = c0 + e;
    oa[u] = t < L ? (float)a[base + t] : 1.0f;
    ob[u] = t < L ? (float)b[base + t] : 0.0f;
    sa[e] = oa[u];
    sb[e] = ob[u];
  }
  int offset = 1;
  for (int d = N >> 1; d > 0; d >>= 1) {
    threadgroup_barrier(mem_flags::mem_threadgroup);
    if (tid < d) {
      int ai = offset * (2 * tid + 1) - 1, bi = offset * (2 * tid + 2) - 1;
      float la = sa[ai], lb = sb[ai], ra = sa[bi], rb = sb[bi];
      sa[bi] = ra * la;
      sb[bi] = ra * lb + rb;
    }
    offset <<= 1;
  }
  threadgroup_barrier(mem_flags::mem_threadgroup);
  if (tid == 0) { sa[N - 1] = 1.0f; sb[N - 1] = 0.0f; }
  for (int d = 1; d < N; d <<= 1) {
    offset >>= 1;
    threadgroup_barrier(mem_flags::mem_threadgroup);
    if (tid < d) {
      int ai = offset * (2 * tid + 1) - 1, bi = offset * (2 * tid + 2) - 1;
      float ta = sa[ai], tb = sb[ai], pa = sa[bi], pb = sb[bi];
      sa[ai] = pa;
      sb[ai] = pb;
      sa[bi] = ta * pa;
      sb[bi] = ta * pb + tb;
    }
  }
  threadgroup_barrier(mem_flags::mem_threadgroup);
  float last = 0.0f;
  for (int u = 0; u < 2; ++u) {
    int e = tid + u * TPB, t = c0 + e;
    float hv = (oa[u] * sa[e]) * carry[0] + (oa[u] * sb[e] + ob[u]);
    if (t < L) h[base + t] = (T)hv;
    last = hv;
  }
  threadgroup_barrier(mem_flags::mem_threadgroup);
  if (tid == TPB - 1) carry[0] = last;
}
