// Attention with K/V tiles staged in shared memory, one thread per query row (online softmax in fp32).
// Causal: the block stops at the last KV tile its LAST query can see (lower-right alignment: key j is visible
// to query i iff j <= i + S - L), so fully masked tiles are never loaded; the diagonal tile is masked per row.
constexpr int BQ = 32, BK = 32;
int L = q_shape[2], S = k_shape[2];
int bh = blockIdx.y;
int q0 = blockIdx.x * BQ;
int i = q0 + threadIdx.x;
bool active = i < L;
const T* kb = k + (size_t)bh * S * HEAD_DIM;
const T* vb = v + (size_t)bh * S * HEAD_DIM;
__shared__ float Ks[BK][HEAD_DIM + 1];
__shared__ float Vs[BK][HEAD_DIM + 1];
float qv[HEAD_DIM], acc[HEAD_DIM];
const float scale = rsqrtf((float)HEAD_DIM);
for (int d = 0; d < HEAD_DIM; ++d) {
  qv[d] = active ? (float)q[((size_t)bh * L + i) * HEAD_DIM + d] * scale : 0.f;
  acc[d] = 0.f;
}
float m = __int_as_float(0xff800000), l = 0.f;
int offset = S - L;
int last_q = min(q0 + BQ, L) - 1;
int kv_end = CAUSAL ? min(S, last_q + offset + 1) : S;
for (int j0 = 0; j0 < kv_end; j0 += BK) {
  for (int e = threadIdx.x; e < BK * HEAD_DIM; e += blockDim.x) {
    int r = e / HEAD_DIM, d = e % HEAD_DIM, j = j0 + r;
    Ks[r][d] = j < S ? (float)kb[(size_t)j * HEAD_DIM + d] : 0.f;
    Vs[r][d] = j < S ? (float)vb[(size_t)j * HEAD_DIM + d] : 0.f;
  }
  __syncthreads();
  int limit = min(BK, kv_end - j0);
  if (CAUSAL) limit = min(limit, i + offset + 1 - j0);
  if (active) {
    for (int r = 0; r < limit; ++r) {
      float s = 0.f;
      for (int d = 0; d < HEAD_DIM; ++d) s += qv[d] * Ks[r][d];
      float m_new = fmaxf(m, s);
      float corr = expf(m - m_new), p = expf(s - m_new);
      l = l * corr + p;
      for (int d = 0; d < HEAD_DIM; ++d) acc[d] = acc[d] * corr + p * Vs[r][d];
      m = m_new;
    }
  }
  __syncthreads();
}
if (active) {
  for (int d = 0; d < HEAD_DIM; ++d) o[((size_t)bh * L + i) * HEAD_DIM + d] = (T)(acc[d] / l);
}
