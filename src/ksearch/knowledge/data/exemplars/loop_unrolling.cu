// ITEMS independent accumulators per thread, unrolled: ITEMS loads in flight instead of one dependent chain.
int row = blockIdx.x;
int cols = x_shape[1];
const T* xr = x + (size_t)row * cols;
float acc[ITEMS];
#pragma unroll
for (int u = 0; u < ITEMS; ++u) acc[u] = 0.f;
for (int base = threadIdx.x; base < cols; base += blockDim.x * ITEMS) {
#pragma unroll
  for (int u = 0; u < ITEMS; ++u) {
    int c = base + u * blockDim.x;
    if (c < cols) acc[u] += (float)xr[c];
  }
}
float s = 0.f;
#pragma unroll
for (int u = 0; u < ITEMS; ++u) s += acc[u];
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
