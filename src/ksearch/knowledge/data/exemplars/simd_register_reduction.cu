// One block per row: strided partial sums, a butterfly inside each warp, warp partials through shared memory.
int row = blockIdx.x;
int cols = x_shape[1];
const T* xr = x + (size_t)row * cols;
float s = 0.f;
for (int c = threadIdx.x; c < cols; c += blockDim.x) s += (float)xr[c];
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
