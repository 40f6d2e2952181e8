// Softmax with one block per row: block max, block sum of exp, then the normalised write (fp32 statistics).
int row = blockIdx.x;
int cols = x_shape[1];
const T* xr = x + (size_t)row * cols;
T* orow = out + (size_t)row * cols;
__shared__ float red[32];
int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
float m = __int_as_float(0xff800000);
for (int c = threadIdx.x; c < cols; c += blockDim.x) m = fmaxf(m, (float)xr[c]);
for (int o = 16; o > 0; o >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffff, m, o));
if (lane == 0) red[warp] = m;
__syncthreads();
m = red[0];
for (int w = 1; w < nw; ++w) m = fmaxf(m, red[w]);
__syncthreads();  // everyone has read red[] before it is reused
float s = 0.f;
for (int c = threadIdx.x; c < cols; c += blockDim.x) s += expf((float)xr[c] - m);
for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffff, s, o);
if (lane == 0) red[warp] = s;
__syncthreads();
s = 0.f;
for (int w = 0; w < nw; ++w) s += red[w];
float inv = 1.f / s;
for (int c = threadIdx.x; c < cols; c += blockDim.x) orow[c] = (T)(expf((float)xr[c] - m) * inv);
