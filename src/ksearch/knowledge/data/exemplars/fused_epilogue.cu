// RMSNorm: the reduction's epilogue (rsqrt, weight multiply, cast) is fused into the store instead of
// running as separate MLX ops over the whole tensor.
int row = blockIdx.x;
int cols = x_shape[1];
const T* xr = x + (size_t)row * cols;
T* orow = out + (size_t)row * cols;
float ss = 0.f;
for (int c = threadIdx.x; c < cols; c += blockDim.x) { float v = (float)xr[c]; ss += v * v; }
for (int o = 16; o > 0; o >>= 1) ss += __shfl_xor_sync(0xffffffff, ss, o);
__shared__ float part[32];
int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
if (lane == 0) part[warp] = ss;
__syncthreads();
ss = 0.f;
for (int i = 0; i < nw; ++i) ss += part[i];
float r = rsqrtf(ss / cols + 1e-5f);
for (int c = threadIdx.x; c < cols; c += blockDim.x) orow[c] = (T)((float)xr[c] * r * (float)w[c]);
