// GQA decode: one threadgroup per (batch, KV head), one SIMD-group per query head of the group; K/V tiles are
// loaded into threadgroup memory once and reused by all G heads. Needs HEAD_DIM % 32 == 0, G <= 32.
// Tiles of BK keys, one key a lane: 32, or 16 above HEAD_DIM 64, so that the two float tiles fit Apple's 32 KB of
// threadgroup memory (2 x 32 x 129 x 4 bytes is 33 KB at HEAD_DIM 128).
constexpr int BK = HEAD_DIM > 64 ? 16 : 32;
constexpr int DPL = HEAD_DIM / 32;
int Hq = q_shape[1], Hkv = k_shape[1], S = k_shape[2];
int G = Hq / Hkv;
int bkv = (int)threadgroup_position_in_grid.x;
int b = bkv / Hkv, hk = bkv % Hkv;
int tid = (int)thread_position_in_threadgroup.x;
int warp = (int)simdgroup_index_in_threadgroup;
uint lane = thread_index_in_simdgroup;
bool active = warp < G;
int h = hk * G + (active ? warp : 0);
size_t kvbase = (size_t)bkv * S * HEAD_DIM;
threadgroup float Ks[BK][HEAD_DIM + 1];
threadgroup float Vs[BK][HEAD_DIM + 1];
const float scale = metal::rsqrt((float)HEAD_DIM);
float qv[HEAD_DIM], acc[DPL];
for (int d = 0; d < HEAD_DIM; ++d) qv[d] = (float)q[((size_t)b * Hq + h) * HEAD_DIM + d] * scale;
for (int u = 0; u < DPL; ++u) acc[u] = 0.0f;
float m = -INFINITY, l = 0.0f;
for (int j0 = 0; j0 < S; j0 += BK) {
  for (int e = tid; e < BK * HEAD_DIM; e += TPB) {
    int r = e / HEAD_DIM, d = e % HEAD_DIM, j = j0 + r;
    Ks[r][d] = j < S ? (float)k[kvbase + (size_t)j * HEAD_DIM + d] : 0.0f;
    Vs[r][d] = j < S ? (float)v[kvbase + (size_t)j * HEAD_DIM + d] : 0.0f;
  }
  threadgroup_barrier(mem_flags::mem_threadgroup);
  bool valid = (int)lane < BK && j0 + (int)lane < S;
  float s = -INFINITY;
  if (valid) {
    s = 0.0f;
    for (int d = 0; d < HEAD_DIM; ++d) s += qv[d] * Ks[lane][d];
  }
  float m_new = metal::max(m, simd_max(s));
  float corr = metal::exp(m - m_new);
  float p = valid ? metal::exp(s - m_new) : 0.0f;
  l = l * corr + simd_sum(p);
  for (int u = 0; u < DPL; ++u) acc[u] *= corr;
  for (ushort r = 0; r < BK; ++r) {
    float pr = simd_shuffle(p, r);
    for (int u = 0; u < DPL; ++u) acc[u] += pr * Vs[r][lane + 32 * u];
  }
  m = m_new;
  threadgroup_barrier(mem_flags::mem_threadgroup);
}
if (active) {
  for (int u = 0; u < DPL; ++u) o[((size_t)b * Hq + h) * HEAD_DIM + lane + 32 * u] = (T)(acc[u] / l);
}
