// GQA decode: one block per (batch, KV head) holds all G = Hq / Hkv query heads that share it (one warp each),
// so every K/V tile is read from memory once and reused G times from shared memory.
// Lane r scores key j0 + r; each lane accumulates HEAD_DIM / 32 output dims. Needs HEAD_DIM % 32 == 0, G <= 32.
constexpr int BK = 32;
constexpr int DPL = HEAD_DIM / 32;
int Hq = q_shape[1], Hkv = k_shape[1], S = k_shape[2];
int G = Hq / Hkv;
int bkv = blockIdx.x;
int b = bkv / Hkv, hk = bkv % Hkv;
int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
bool active = warp < G;
int h = hk * G + (active ? warp : 0);
const T* qr = q + ((size_t)b * Hq + h) * HEAD_DIM;
const T* kb = k + (size_t)bkv * S * HEAD_DIM;
const T* vb = v + (size_t)bkv * S * HEAD_DIM;
__shared__ float Ks[BK][HEAD_DIM + 1];
__shared__ float Vs[BK][HEAD_DIM + 1];
const float scale = rsqrtf((float)HEAD_DIM);
const float NEG = __int_as_float(0xff800000);
float qv[HEAD_DIM], acc[DPL];
for (int d = 0; d < HEAD_DIM; ++d) qv[d] = (float)qr[d] * scale;
for (int u = 0; u < DPL; ++u) acc[u] = 0.f;
float m = NEG, l = 0.f;
for (int j0 = 0; j0 < S; j0 += BK) {
  for (int e = threadIdx.x; e < BK * HEAD_DIM; e += blockDim.x) {
    int r = e / HEAD_DIM, d = e % HEAD_DIM, j = j0 + r;
    Ks[r][d] = j < S ? (float)kb[(size_t)j * HEAD_DIM + d] : 0.f;
    Vs[r][d] = j < S ? (float)vb[(size_t)j * HEAD_DIM + d] : 0.f;
  }
  __syncthreads();
  bool valid = j0 + lane < S;
  float s = NEG;
  if (valid) {
    s = 0.f;
    for (int d = 0; d < HEAD_DIM; ++d) s += qv[d] * Ks[lane][d];
  }
  float tmax = s;
  for (int o = 16; o > 0; o >>= 1) tmax = fmaxf(tmax, __shfl_xor_sync(0xffffffff, tmax, o));
  float m_new = fmaxf(m, tmax);
  float corr = expf(m - m_new);
  float p = valid ? expf(s - m_new) : 0.f;
  float ps = p;
  for (int o = 16; o > 0; o >>= 1) ps += __shfl_xor_sync(0xffffffff, ps, o);
  l = l * corr + ps;
  for (int u = 0; u < DPL; ++u) acc[u] *= corr;
  for (int r = 0; r < BK; ++r) {
    float pr = __shfl_sync(0xffffffff, p, r);
    for (int u = 0; u < DPL; ++u) acc[u] += pr * Vs[r][lane + 32 * u];
  }
  m = m_new;
  __syncthreads();
}
if (active) {
  for (int u = 0; u < DPL; ++u) o[((size_t)b * Hq + h) * HEAD_DIM + lane + 32 * u] = (T)(acc[u] / l);
}
