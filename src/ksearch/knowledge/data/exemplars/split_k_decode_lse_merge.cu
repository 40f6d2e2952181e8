// Split-K decode: one warp per (batch, query head, split) runs online softmax over its slice of the cache and
// writes a partial (max, sum, acc[D]); a merge (MLX ops, below) weights partials by exp(m_i - max m).
// This spreads a long sequence over many SMs when batch * heads alone cannot fill the GPU.
int lane = threadIdx.x & 31;
int wid = (int)((blockIdx.x * blockDim.x + threadIdx.x) >> 5);
int B = q_shape[0], Hq = q_shape[1];
int Hkv = k_shape[1], S = k_shape[2];
if (wid >= B * Hq * NSPLIT) return;  // no barrier in this kernel: whole warps leave together
int split = wid % NSPLIT, bh = wid / NSPLIT;
int b = bh / Hq, h = bh % Hq;
int hk = h / (Hq / Hkv);
int per = (S + NSPLIT - 1) / NSPLIT;
int start = split * per, stop = min(S, start + per);
const T* qr = q + (size_t)bh * HEAD_DIM;
const T* kb = k + ((size_t)b * Hkv + hk) * S * HEAD_DIM;
const T* vb = v + ((size_t)b * Hkv + hk) * S * HEAD_DIM;
const float scale = rsqrtf((float)HEAD_DIM);
const float NEG = __int_as_float(0xff800000);
float qv[HEAD_DIM], acc[HEAD_DIM];
for (int d = 0; d < HEAD_DIM; ++d) { qv[d] = (float)qr[d] * scale; acc[d] = 0.f; }
float m = NEG, l = 0.f;
for (int j = start + lane; j < stop; j += 32) {
  float s = 0.f;
  for (int d = 0; d < HEAD_DIM; ++d) s += qv[d] * (float)kb[(size_t)j * HEAD_DIM + d];
  float m_new = fmaxf(m, s);
  float corr = expf(m - m_new), p = expf(s - m_new);
  l = l * corr + p;
  for (int d = 0; d < HEAD_DIM; ++d) acc[d] = acc[d] * corr + p * (float)vb[(size_t)j * HEAD_DIM + d];
  m = m_new;
}
float gm = m;
for (int o = 16; o > 0; o >>= 1) gm = fmaxf(gm, __shfl_xor_sync(0xffffffff, gm, o));
float w = (m == NEG) ? 0.f : expf(m - gm);  // lanes that saw no position carry no weight
float lw = l * w;
for (int o = 16; o > 0; o >>= 1) lw += __shfl_xor_sync(0xffffffff, lw, o);
for (int d = 0; d < HEAD_DIM; ++d) {
  float a = acc[d] * w;
  for (int o = 16; o > 0; o >>= 1) a += __shfl_xor_sync(0xffffffff, a, o);
  if (lane == 0) part_acc[(size_t)wid * HEAD_DIM + d] = a;
}
if (lane == 0) { part_m[wid] = gm; part_l[wid] = lw; }
