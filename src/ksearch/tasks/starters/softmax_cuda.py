# Naive MLX-CUDA softmax: one thread per row, three sequential passes. Correct, deliberately slow.
import mlx.core as mx

_SOURCE = """
    int row = blockIdx.x * blockDim.x + threadIdx.x;
    int rows = x_shape[0];
    int cols = x_shape[1];
    if (row >= rows) return;
    const T* xr = x + (size_t)row * cols;
    T* orow = out + (size_t)row * cols;
    float m = __int_as_float(0xff800000);
    for (int c = 0; c < cols; ++c) m = fmaxf(m, (float)xr[c]);
    float s = 0.f;
    for (int c = 0; c < cols; ++c) s += expf((float)xr[c] - m);
    float inv = 1.f / s;
    for (int c = 0; c < cols; ++c) orow[c] = (T)(expf((float)xr[c] - m) * inv);
"""

_kernel = mx.fast.cuda_kernel(name="softmax_naive", input_names=["x"], output_names=["out"], source=_SOURCE)


def run(x):
    rows = x.shape[0]
    return _kernel(
        inputs=[x], template=[("T", x.dtype)], grid=(rows, 1, 1), threadgroup=(min(256, rows), 1, 1),
        output_shapes=[x.shape], output_dtypes=[x.dtype],
    )[0]
