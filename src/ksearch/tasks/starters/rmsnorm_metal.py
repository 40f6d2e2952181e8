# Naive MLX-Metal RMSNorm: one thread per row, two sequential passes. Correct, deliberately slow.
import mlx.core as mx

_SOURCE = """
    uint row = thread_position_in_grid.x;
    int rows = x_shape[0];
    int dim = x_shape[1];
    if ((int)row >= rows) return;
    float ss = 0.0f;
    for (int c = 0; c < dim; ++c) { float v = (float)x[row * dim + c]; ss += v * v; }
    float r = metal::rsqrt(ss / dim + 1e-5f);
    for (int c = 0; c < dim; ++c) out[row * dim + c] = (T)((float)x[row * dim + c] * r * (float)weight[c]);
"""

_kernel = mx.fast.metal_kernel(name="rmsnorm_naive", input_names=["x", "weight"], output_names=["out"], source=_SOURCE)


def run(x, weight):
    rows = x.shape[0]
    return _kernel(
        inputs=[x, weight], template=[("T", x.dtype)], grid=(rows, 1, 1), threadgroup=(min(256, rows), 1, 1),
        output_shapes=[x.shape], output_dtypes=[x.dtype],
    )[0]
