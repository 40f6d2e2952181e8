# Naive MLX-Metal softmax: one thread per row, three sequential passes. Correct, deliberately slow.
import mlx.core as mx

_SOURCE = """
    uint row = thread_position_in_grid.x;
    int rows = x_shape[0];
    int cols = x_shape[1];
    if ((int)row >= rows) return;
    float m = -INFINITY;
    for (int c = 0; c < cols; ++c) m = metal::max(m, (float)x[row * cols + c]);
    float s = 0.0f;
    for (int c = 0; c < cols; ++c) s += metal::exp((float)x[row * cols + c] - m);
    float inv = 1.0f / s;
    for (int c = 0; c < cols; ++c) out[row * cols + c] = (T)(metal::exp((float)x[row * cols + c] - m) * inv);
"""

_kernel = mx.fast.metal_kernel(name="softmax_naive", input_names=["x"], output_names=["out"], source=_SOURCE)


def run(x):
    rows = x.shape[0]
    return _kernel(
        inputs=[x], template=[("T", x.dtype)], grid=(rows, 1, 1), threadgroup=(min(256, rows), 1, 1),
        output_shapes=[x.shape], output_dtypes=[x.dtype],
    )[0]
