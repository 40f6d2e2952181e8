// Online softmax: one read pass keeps a running (max, sum) per thread, rescaling the sum when the max grows;
// the pairs merge across lanes and warps with the same rule; a second pass writes.
int row = blockIdx.x;
int cols = x_shape[1];
const T* xr = x + (size_t)row * cols;
T* orow = out + (size_t)row * cols;
const float NEG = __int_as_float(0xff800000);
float m = NEG, l = 0.f;
for (int c = threadIdx.x; c < cols; c += blockDim.x) {
  float v = (float)xr[c];
  float m_new = fmaxf(m, v);
  l = l * expf(m - m_new) + expf(v - m_new);
  m = m_new;
}
for (int o = 16; o > 0; o >>= 1) {
  float m2 = __shfl_xor_sync(0xffffffff, m, o), l2 = __shfl_xor_sync(0xffffffff, l, o);
  float mm = fmaxf(m, m2);
  // an empty partner has m = -inf and l = 0: its weight must be 0, not exp(nan)
  l = (m == NEG ? 0.f : l * expf(m - mm)) + (m2 == NEG ? 0.f : l2 * expf(m2 - mm));
  m = mm;
}
__shared__ float sm[32], sl[32];
int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
if (lane == 0) { sm[warp] = m; sl[warp] = l; }
__syncthreads();
m = sm[0];
for (int w = 1; w < nw; ++w) m = fmaxf(m, sm[w]);
l = 0.f;
for (int w = 0; w < nw; ++w) l += sm[w] == NEG ? 0.f : sl[w] * expf(sm[w] - m);
float inv = 1.f / l;
for (int c = threadIdx.x; c < cols; c += blockDim.x) orow[c] = (T)(expf((float)xr[c] - m) * inv);
