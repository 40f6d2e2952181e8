// Chunked scan with a carried prefix (the shape of Mamba's selective-scan kernel): each thread scans ITEMS
// consecutive elements sequentially in registers, a block scan (warp shuffles + warp totals) gives each thread the
// state entering its items, and the chunk's final state is carried into the next chunk of TPB * ITEMS elements.
constexpr int CH = TPB * ITEMS;
int row = blockIdx.x;
int L = a_shape[1];
int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
const T* ar = a + (size_t)row * L;
const T* br = b + (size_t)row * L;
T* hr = h + (size_t)row * L;
__shared__ float wa[32], wb[32];
__shared__ float carry;
if (tid == 0) carry = 0.f;
__syncthreads();
for (int c0 = 0; c0 < L; c0 += CH) {
  int base = c0 + tid * ITEMS;
  float la[ITEMS], lb[ITEMS];
  float A = 1.f, Bv = 0.f;
#pragma unroll
  for (int u = 0; u < ITEMS; ++u) {
    int t = base + u;
    float ea = t < L ? (float)ar[t] : 1.f, eb = t < L ? (float)br[t] : 0.f;
    Bv = ea * Bv + eb;
    A = ea * A;
    la[u] = A;
    lb[u] = Bv;
  }
  float IA = A, IB = Bv;  // inclusive scan of thread totals within the warp
  for (int o = 1; o < 32; o <<= 1) {
    float pa = __shfl_up_sync(0xffffffff, IA, o), pb = __shfl_up_sync(0xffffffff, IB, o);
    if (lane >= o) { IB = IA * pb + IB; IA = IA * pa; }
  }
  float EA = __shfl_up_sync(0xffffffff, IA, 1), EB = __shfl_up_sync(0xffffffff, IB, 1);
  if (lane == 0) { EA = 1.f; EB = 0.f; }
  if (lane == 31) { wa[warp] = IA; wb[warp] = IB; }
  __syncthreads();
  if (warp == 0) {
    float xa = lane < TPB / 32 ? wa[lane] : 1.f, xb = lane < TPB / 32 ? wb[lane] : 0.f;
    for (int o = 1; o < 32; o <<= 1) {
      float pa = __shfl_up_sync(0xffffffff, xa, o), pb = __shfl_up_sync(0xffffffff, xb, o);
      if (lane >= o) { xb = xa * pb + xb; xa = xa * pa; }
    }
    float ea = __shfl_up_sync(0xffffffff, xa, 1), eb = __shfl_up_sync(0xffffffff, xb, 1);
    if (lane == 0) { ea = 1.f; eb = 0.f; }
    if (lane < TPB / 32) { wa[lane] = ea; wb[lane] = eb; }
  }
  __syncthreads();
  float PA = EA * wa[warp], PB = EA * wb[warp] + EB;  // (in-warp exclusive) o (earlier warps)
  float hin = PA * carry + PB;                         // state entering this thread's items
  float last = 0.f;
#pragma unroll
  for (int u = 0; u < ITEMS; ++u) {
    float hv = la[u] * hin + lb[u];
    if (base + u < L) hr[base + u] = (T)hv;
    last = hv;
  }
  __syncthreads();
  if (tid == TPB - 1) carry = last;
  __syncthreads();
}
