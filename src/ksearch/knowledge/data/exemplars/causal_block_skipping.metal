// Attention with K/V tiles in threadgroup memory, one thread per query row, online softmax in fp32.
// Causal: stop at the last KV tile the threadgroup's last query sees (lower-right alignment); mask the diagonal.
constexpr int BQ = 32, BK = 32;
int L = q_shape[2], S = k_shape[2];
int bh = (int)threadgroup_position_in_grid.y;
int tid = (int)thread_position_in_threadgroup.x;
int q0 = (int)threadgroup_position_in_grid.x * BQ;
int i = q0 + tid;
bool active = i < L;
size_t kvbase = (size_t)bh * S * HEAD_DIM;
threadgroup float Ks[BK][HEAD_DIM + 1];
threadgroup float Vs[BK][HEAD_DIM + 1];
float qv[HEAD_DIM], acc[HEAD_DIM];
const float scale = metal::rsqrt((float)HEAD_DIM);
for (int d = 0; d < HEAD_DIM; ++d) {
  qv[d] = active ? (float)q[((size_t)bh * L + i) * HEAD_DIM + d] * scale : 0.0f;
  acc[d] = 0.0f;
}
float m = -INFINITY, l = 0.0f;
int offset = S - L;
int last_q = metal::min(q0 + BQ, L) - 1;
int kv_end = CAUSAL ? metal::min(S, last_q + offset + 1) : S;
for (int j0 = 0; j0 < kv_end; j0 += BK) {
  for (int e = tid; e < BK * HEAD_DIM; e += BQ) {
    int r = e / HEAD_DIM, d = e % HEAD_DIM, j = j0 + r;
    Ks[r][d] = j < S ? (float)k[kvbase + (size_t)j * HEAD_DIM + d] : 0.0f;
    Vs[r][d] = j < S ? (float)v[kvbase + (size_t)j * HEAD_DIM + d] : 0.0f;
  }
  threadgroup_barrier(mem_flags::mem_threadgroup);
  int limit = metal::min(BK, kv_end - j0);
  if (CAUSAL) limit = metal::min(limit, i + offset + 1 - j0);
  if (active) {
    for (int r = 0; r < limit; ++r) {
      float s = 0.0f;
      for (int d = 0; d < HEAD_DIM; ++d) s += qv[d] * Ks[r][d];
      float m_new = metal::max(m, s);
      float corr = metal::exp(m - m_new), p = metal::exp(s - m_new);
      l = l * corr + p;
      for (int d = 0; d < HEAD_DIM; ++d) acc[d] = acc[d] * corr + p * Vs[r][d];
      m = m_new;
    }
  }
  threadgroup_barrier(mem_flags::mem_threadgroup);
}
if (active) {
  for (int d = 0; d < HEAD_DIM; ++d) o[((size_t)bh * L + i) * HEAD_DIM + d] = (T)(acc[d] / l);
}
