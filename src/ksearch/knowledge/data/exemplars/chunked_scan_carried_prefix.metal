// Chunked scan with a carried prefix: ITEMS consecutive elements per thread scanned in registers, a block scan
// of thread totals (SIMD shuffles + SIMD-group totals), the chunk's final state carried into the next chunk.
constexpr int CH = TPB * ITEMS;
int row = (int)threadgroup_position_in_grid.x;
int tid = (int)thread_position_in_threadgroup.x;
uint lane = thread_index_in_simdgroup;
uint warp = simdgroup_index_in_threadgroup;
int L = a_shape[1];
size_t rbase = (size_t)row * L;
threadgroup float wa[32], wb[32];
threadgroup float carry[1];
if (tid == 0) carry[0] = 0.0f;
threadgroup_barrier(mem_flags::mem_threadgroup);
for (int c0 = 0; c0 < L; c0 += CH) {
  int base = c0 + tid * ITEMS;
  float la[ITEMS], lb[ITEMS];
  float A = 1.0f, Bv = 0.0f;
  for (int u = 0; u < ITEMS; ++u) {
    int t = base + u;
    float ea = t < L ? (float)a[rbase + t] : 1.0f, eb = t < L ? (float)b[rbase + t] : 0.0f;
    Bv = ea * Bv + eb;
    A = ea * A;
    la[u] = A;
    lb[u] = Bv;
  }
  float IA = A, IB = Bv;
  for (ushort o = 1; o < 32; o <<= 1) {
    float pa = simd_shuffle_up(IA, o), pb = simd_shuffle_up(IB, o);
    if (lane >= o) { IB = IA * pb + IB; IA = IA * pa; }
  }
  float EA = simd_shuffle_up(IA, (ushort)1), EB = simd_shuffle_up(IB, (ushort)1);
  if (lane == 0) { EA = 1.0f; EB = 0.0f; }
  if (lane == 31) { wa[warp] = IA; wb[warp] = IB; }
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
  float hin = (EA * wa[warp]) * carry[0] + (EA * wb[warp] + EB);
  float last = 0.0f;
  for (int u = 0; u < ITEMS; ++u) {
    float hv = la[u] * hin + lb[u];
    if (base + u < L) h[rbase + base + u] = (T)hv;
    last = hv;
  }
  threadgroup_barrier(mem_flags::mem_threadgroup);
  if (tid == TPB - 1) carry[0] = last;
  threadgroup_barrier(mem_flags::mem_threadgroup);
}
