// Linear recurrence h_t = a_t * h_{t-1} + b_t as a scan of pairs (a, b), combine (later o earlier) =
// (a2*a1, a2*b1 + b2), identity (1, 0). Per chunk of blockDim elements: an inclusive shuffle-up scan inside each
// warp, an exclusive scan of the warp totals by warp 0, then the prefix carried from the previous chunk.
int row = blockIdx.x;
int L = a_shape[1];
const T* ar = a + (size_t)row * L;
const T* br = b + (size_t)row * L;
T* hr = h + (size_t)row * L;
int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
__shared__ float wa[32], wb[32];
__shared__ float carry;
if (threadIdx.x == 0) carry = 0.f;
__syncthreads();
for (int c0 = 0; c0 < L; c0 += blockDim.x) {
  int t = c0 + threadIdx.x;
  float A = t < L ? (float)ar[t] : 1.f;  // identity padding leaves the state unchanged
  float Bv = t < L ? (float)br[t] : 0.f;
  for (int o = 1; o < 32; o <<= 1) {
    float pa = __shfl_up_sync(0xffffffff, A, o), pb = __shfl_up_sync(0xffffffff, Bv, o);
    if (lane >= o) { Bv = A * pb + Bv; A = A * pa; }
  }
  if (lane == 31) { wa[warp] = A; wb[warp] = Bv; }
  __syncthreads();
  if (warp == 0) {
    float xa = lane < nw ? wa[lane] : 1.f, xb = lane < nw ? wb[lane] : 0.f;
    for (int o = 1; o < 32; o <<= 1) {
      float pa = __shfl_up_sync(0xffffffff, xa, o), pb = __shfl_up_sync(0xffffffff, xb, o);
      if (lane >= o) { xb = xa * pb + xb; xa = xa * pa; }
    }
    float ea = __shfl_up_sync(0xffffffff, xa, 1), eb = __shfl_up_sync(0xffffffff, xb, 1);
    if (lane == 0) { ea = 1.f; eb = 0.f; }
    if (lane < nw) { wa[lane] = ea; wb[lane] = eb; }
  }
  __syncthreads();
  float pa = wa[warp], pb = wb[warp];
  float hv = (A * pa) * carry + (A * pb + Bv);
  if (t < L) hr[t] = (T)hv;
  __syncthreads();  // every thread has read carry and wa/wb
  if (threadIdx.x == blockDim.x - 1) carry = hv;
  __syncthreads();
}
