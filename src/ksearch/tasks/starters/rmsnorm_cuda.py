# Naive MLX-CUDA RMSNorm: one thread per row, two sequential passes. Correct, deliberately slow.
import mlx.core as mx

_SOURCE = """
    int row = blockIdx.x * blockDim.x + threadIdx.x;
    int rows = x_shape[0];
    int dim = x_shape[1];
    if (row >= rows) return;
    const T* xr = x + (size_t)row * dim;
    float ss = 0.f;
    for (int c = 0; c < dim; ++c) { float v = (float)xr[c]; ss += v * v; }
    float r = rsqrtf(ss / dim + 1e-5f);
    for (int c = 0; c < dim; ++c) out[(size_t)row * dim + c] = (T)((float)xr[c] * r * (float)weight[c]);
"""

_kernel = mx.fast.cuda_kernel(name="rmsnorm_naive", input_names=["x", "weight"], output_names=["out"], source=_SOURCE)


def run(x, weight):
    rows = x.shape[0]
    return _kernel(
        inputs=[x, weight], template=[("T", x.dtype)], grid=(rows, 1, 1), threadgroup=(min(256, rows), 1, 1),
        output_shapes=[x.shape], output_dtypes=[x.dtype],
    )[0]
