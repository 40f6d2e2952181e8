# Naive MLX-CUDA selective scan: one thread per (batch, channel), sequential over L, N states in registers.
import mlx.core as mx

_SOURCE = """
    int idx = blockIdx.x * blockDim.x + threadIdx.x;
    int batch = u_shape[0], dim = u_shape[1], L = u_shape[2];
    int n_state = A_shape[1];
    if (idx >= batch * dim) return;
    int b = idx / dim, d = idx % dim;
    float x[MAX_N];
    for (int n = 0; n < n_state; ++n) x[n] = 0.f;
    float bias = delta_bias[d], Dd = D[d];
    size_t row = ((size_t)b * dim + d) * L;
    for (int t = 0; t < L; ++t) {
        float dv = (float)delta[row + t] + bias;
        float dt = dv > 20.f ? dv : log1pf(expf(dv));
        float uv = (float)u[row + t];
        float y = 0.f;
        for (int n = 0; n < n_state; ++n) {
            float bv = (float)B[((size_t)b * n_state + n) * L + t];
            float cv = (float)C[((size_t)b * n_state + n) * L + t];
            x[n] = expf(dt * A[d * n_state + n]) * x[n] + dt * bv * uv;
            y += x[n] * cv;
        }
        y += Dd * uv;
        float zv = (float)z[row + t];
        y *= zv / (1.f + expf(-zv));
        y_out[row + t] = (T)y;
    }
    for (int n = 0; n < n_state; ++n) last_state[((size_t)b * dim + d) * n_state + n] = x[n];
"""

_kernel = mx.fast.cuda_kernel(
    name="selective_scan_naive",
    input_names=["u", "delta", "A", "B", "C", "D", "z", "delta_bias"],
    output_names=["y_out", "last_state"],
    source=_SOURCE,
)


def run(u, delta, A, B, C, D, z, delta_bias):
    batch, dim, length = u.shape
    n_state = A.shape[1]
    threads = batch * dim
    return tuple(_kernel(
        inputs=[u, delta, A, B, C, D, z, delta_bias],
        template=[("T", u.dtype), ("MAX_N", max(16, n_state))],
        grid=(threads, 1, 1), threadgroup=(min(128, threads), 1, 1),
        output_shapes=[u.shape, (batch, dim, n_state)], output_dtypes=[u.dtype, mx.float32],
    ))
