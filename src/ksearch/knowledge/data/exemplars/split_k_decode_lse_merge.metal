// Split-K decode: one SIMD-group per (batch, query head, split) writes a partial (max, sum, acc[D]);
// the partials merge with weights exp(m_i - max m) (MLX ops or a second small kernel).
uint lane = thread_index_in_simdgroup;
int wid = (int)(thread_position_in_grid.x / 32);
int B = q_shape[0], Hq = q_shape[1];
int Hkv = k_shape[1], S = k_shape[2];
if (wid >= B * Hq * NSPLIT) return;
int split = wid % NSPLIT, bh = wid / NSPLIT;
int b = bh / Hq, h = bh % Hq;
int hk = h / (Hq / Hkv);
int per = (S + NSPLIT - 1) / NSPLIT;
int start = split * per, stop = metal::min(S, start + per);
size_t kvbase = ((size_t)b * Hkv + hk) * S * HEAD_DIM;
const float scale = metal::rsqrt((float)HEAD_DIM);
float qv[HEAD_DIM], acc[HEAD_DIM];
for (int d = 0; d < HEAD_DIM; ++d) { qv[d] = (float)q[(size_t)bh * HEAD_DIM + d] * scale; acc[d] = 0.0f; }
float m = -INFINITY, l = 0.0f;
for (int j = start + (int)lane; j < stop; j += 32) {
  float s = 0.0f;
  for (int d = 0; d < HEAD_DIM; ++d) s += qv[d] * (float)k[kvbase + (size_t)j * HEAD_DIM + d];
  float m_new = metal::max(m, s);
  float corr = metal::exp(m - m_new), p = metal::exp(s - m_new);
  l = l * corr + p;
  for (int d = 0; d < HEAD_DIM; ++d) acc[d] = acc[d] * corr + p * (float)v[kvbase + (size_t)j * HEAD_DIM + d];
  m = m_new;
}
float gm = simd_max(m);
float w = metal::isinf(m) ? 0.0f : metal::exp(m - gm);
float lw = simd_sum(l * w);
for (int d = 0; d < HEAD_DIM; ++d) {
  float a = simd_sum(acc[d] * w);
  if (lane == 0) part_acc[(size_t)wid * HEAD_DIM + d] = a;
}
if (lane == 0) { part_m[wid] = gm; part_l[wid] = lw; }
