// 16-byte loads: AlignedVector<T, 16 / sizeof(T)> (4 floats or 8 halves) per thread per step, used only when the
// row start is 16-byte aligned (cols a multiple of the width); a scalar loop covers the tail.
int row = blockIdx.x;
int cols = x_shape[1];
const T* xr = x + (size_t)row * cols;
constexpr int W = 16 / sizeof(T);
using Vec = AlignedVector<T, W>;
float s = 0.f;
int vec_end = (reinterpret_cast<size_t>(xr) % 16 == 0) ? (cols / W) * W : 0;
const Vec* xv = reinterpret_cast<const Vec*>(xr);
for (int c = threadIdx.x; c < vec_end / W; c += blockDim.x) {
  Vec v = xv[c];
#pragma unroll
  for (int u = 0; u < W; ++u) s += (float)v[u];
}
for (int c = vec_end + threadIdx.x; c < cols; c += blockDim.x) s += (float)xr[c];
for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffff, s, o);
__shared__ float part[32];
int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
if (lane == 0) part[warp] = s;
__syncthreads();
if (warp == 0) {
  s = lane < (int)(blockDim.x >> 5) ? part[lane] : 0.f;
  for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffff, s, o);
  if (lane == 0) out[row] = (T)s;
}
