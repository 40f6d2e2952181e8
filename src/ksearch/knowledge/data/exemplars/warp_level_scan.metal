// Linear-recurrence scan of (a, b) pairs: simd_shuffle_up inside each SIMD-group (simd_prefix_* only sums),
// an exclusive scan of SIMD-group totals, then the prefix carried from the previous chunk.
int row = (int)threadgroup_position_in_grid.x;
int tid = (int)thread_position_in_threadgroup.x;
uint lane = thread_index_in_simdgroup;
uint warp = simdgroup_index_in_threadgroup;
int L = a_shape[1];
size_t base = (size_t)row * L;
threadgroup float wa[32], wb[32];
threadgroup float carry[1];
if (tid == 0) carry[0] = 0.0f;
threadgroup_barrier(mem_flags::mem_threadgroup);
for (int c0 = 0; c0 < L; c0 += TPB) {
  int t = c0 + tid;
  float A = t < L ? (float)a[base + t] : 1.0f;
  float Bv = t < L ? (float)b[base + t] : 0.0f;
  for (ushort o = 1; o < 32; o <<= 1) {
    float pa = simd_shuffle_up(A, o), pb = simd_shuffle_up(Bv, o);
    if (lane >= o) { Bv = A * pb + Bv; A = A * pa; }
  }
  if (lane == 31) { wa[warp] = A; wb[warp] = Bv; }
  threadgroup_barrier(mem_flags::mem_threadgroup);
  if (warp == 0) {
    float xa = lane < TPB / 32 ? wa[lane] : 1.0f, xb = lane < TPB / 32 ? wb[lane] : 0.0f;
    for (ushort o = 1; o < 32; o <<= 1) {
      float pa = simd_shuffle_up(xa, o), pb = simd_shuffle_up(xb, o);
      if (lane >= o) { xb = xa * pb + xb; xa = xa * pa; }
    }
    float ea = simd_shuffle_up(xa, (ushort)1), eb = simd_shuffle_up(xb, (ushort)1);
    if (lane == 0) { ea = 1.0f; eb = 0.0f; }
    if (lane < TPB / 32) { wa[lane] = ea; wb[lane] = eb; }
  }
  threadgroup_barrier(mem_flags::mem_threadgroup);
  float hv = (A * wa[warp]) * carry[0] + (A * wb[warp] + Bv);
  if (t < L) h[base + t] = (T)hv;
  threadgroup_barrier(mem_flags::mem_threadgroup);
  if (tid == TPB - 1) carry[0] = hv;
  threadgroup_barrier(mem_flags::mem_threadgroup);
}
