// One warp per row, blockDim/32 rows per block: short rows keep every lane busy and need no shared memory.
int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
int row = blockIdx.x * (blockDim.x >> 5) + warp;
int rows = x_shape[0], cols = x_shape[1];
if (row >= rows) return;  // no barrier follows: a whole warp leaves together
const T* xr = x + (size_t)row * cols;
float s = 0.f;
for (int c = lane; c < cols; c += 32) s += (float)xr[c];
for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffff, s, o);
if (lane == 0) out[row] = (T)s;
