// Blelloch (work-efficient) exclusive scan of (a, b) pairs over 2*TPB elements per chunk: an up-sweep builds
// subtree totals (right o left), the root is set to the identity (1, 0), and a down-sweep hands each left child
// its parent's prefix P and each right child (left total o P). Inclusive value = element o exclusive prefix.
constexpr int N = 2 * TPB;
int row = blockIdx.x;
int L = a_shape[1];
int tid = threadIdx.x;
const T* ar = a + (size_t)row * L;
const T* br = b + (size_t)row * L;
T* hr = h + (size_t)row * L;
__shared__ float sa[N], sb[N];
__shared__ float carry;
if (tid == 0) carry = 0.f;
for (int c0 = 0; c0 < L; c0 += N) {
  float oa[2], ob[2];
  for (int u = 0; u < 2; ++u) {
    int e = tid + u * TPB, t = c0 + e;
    oa[u] = t < L ? (float)ar[t] : 1.f;
    ob[u] = t < L ? (float)br[t] : 0.f;
    sa[e] = oa[u];
    sb[e] = ob[u];
  }
  int offset = 1;
  for (int d = N >> 1; d > 0; d >>= 1) {
    __syncthreads();
    if (tid < d) {
      int ai = offset * (2 * tid + 1) - 1, bi = offset * (2 * tid + 2) - 1;
      float la = sa[ai], lb = sb[ai], ra = sa[bi], rb = sb[bi];
      sa[bi] = ra * la;
      sb[bi] = ra * lb + rb;
    }
    offset <<= 1;
  }
  __syncthreads();
  if (tid == 0) { sa[N - 1] = 1.f; sb[N - 1] = 0.f; }
  for (int d = 1; d < N; d <<= 1) {
    offset >>= 1;
    __syncthreads();
    if (tid < d) {
      int ai = offset * (2 * tid + 1) - 1, bi = offset * (2 * tid + 2) - 1;
      float ta = sa[ai], tb = sb[ai], pa = sa[bi], pb = sb[bi];
      sa[ai] = pa;
      sb[ai] = pb;
      sa[bi] = ta * pa;
      sb[bi] = ta * pb + tb;
    }
  }
  __syncthreads();
  float last = 0.f;
  for (int u = 0; u < 2; ++u) {
    int e = tid + u * TPB, t = c0 + e;
    float ia = oa[u] * sa[e], ib = oa[u] * sb[e] + ob[u];
    float hv = ia * carry + ib;
    if (t < L) hr[t] = (T)hv;
    last = hv;
  }
  __syncthreads();
  if (tid == TPB - 1) carry = last;
}
