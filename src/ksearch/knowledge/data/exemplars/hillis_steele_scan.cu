// Hillis-Steele inclusive scan of (a, b) pairs over a chunk of TPB elements in shared memory: log2(TPB) steps,
// each element combines with the one `o` places earlier; two buffers avoid read/write races. O(n log n) work,
// fine for one chunk per block; the chunk's last state is carried into the next chunk.
int row = blockIdx.x;
int L = a_shape[1];
int tid = threadIdx.x;
const T* ar = a + (size_t)row * L;
const T* br = b + (size_t)row * L;
T* hr = h + (size_t)row * L;
__shared__ float sa[2][TPB], sb[2][TPB];
__shared__ float carry;
if (tid == 0) carry = 0.f;
for (int c0 = 0; c0 < L; c0 += TPB) {
  int t = c0 + tid;
  sa[0][tid] = t < L ? (float)ar[t] : 1.f;
  sb[0][tid] = t < L ? (float)br[t] : 0.f;
  __syncthreads();
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
    __syncthreads();
  }
  float hv = sa[src][tid] * carry + sb[src][tid];
  if (t < L) hr[t] = (T)hv;
  __syncthreads();
  if (tid == TPB - 1) carry = hv;
}
