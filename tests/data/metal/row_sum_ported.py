# row_sum of tests/data/cuda/reduction.cu carried over to MLX-Metal construct by construct, in the forms
# `ksearch port tests/data/cuda/reduction.cu --backend mlx-metal` gives (the CUDA construct in each comment).
import mlx.core as mx

_SOURCE = """
    threadgroup float buf[256];                                // __shared__ float buf[256];
    uint row = threadgroup_position_in_grid.x;                 // blockIdx.x
    uint tid = thread_position_in_threadgroup.x;               // threadIdx.x
    uint nt = threads_per_threadgroup.x;                       // blockDim.x
    int cols = x_shape[1];
    float s = 0.0f;
    for (int c = tid; c < cols; c += nt) s += x[(size_t)row * cols + c];   // __ldg(&x[...]): a plain load
    buf[tid] = s;
    threadgroup_barrier(mem_flags::mem_threadgroup);           // __syncthreads();
    for (uint stride = nt / 2; stride > 32; stride >>= 1) {
        if (tid < stride) buf[tid] += buf[tid + stride];
        threadgroup_barrier(mem_flags::mem_threadgroup);
    }
    if (tid < 32) {
        float v = buf[tid] + buf[tid + 32];
        for (ushort o = 16; o > 0; o >>= 1) v += simd_shuffle_down(v, o);   // __shfl_down_sync(0xffffffff, v, o)
        if (tid == 0) atomic_fetch_add_explicit(&out[row], v, memory_order_relaxed);   // atomicAdd(&out[row], v)
    }
"""

# atomicAdd into an output the CUDA launcher zeroes (cudaMemset): atomic_outputs=True and init_value=0.
_kernel = mx.fast.metal_kernel(name="row_sum", input_names=["x"], output_names=["out"], source=_SOURCE,
                               atomic_outputs=True)


def run(x):
    rows = x.shape[0]
    return _kernel(inputs=[x], grid=(rows * 256, 1, 1), threadgroup=(256, 1, 1), output_shapes=[(rows,)],
                   output_dtypes=[mx.float32], init_value=0)[0]
