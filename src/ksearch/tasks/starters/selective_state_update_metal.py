# Naive MLX-Metal decode step: a conv kernel and an SSM kernel (one thread per (batch, channel)) around MLX matmuls.
import mlx.core as mx

_CONV = """
    int idx = (int)thread_position_in_grid.x;
    int batch = x_shape[0], dim = x_shape[1], km1 = conv_state_shape[1];
    if (idx >= batch * dim) return;
    int b = idx / dim, d = idx % dim;
    int K = km1 + 1;
    float acc = (float)conv_bias[d];
    for (int k = 0; k < km1; ++k) {
        float v = (float)conv_state[(b * km1 + k) * dim + d];
        acc += (float)conv_weight[d * K + k] * v;
        if (k > 0) new_conv[(b * km1 + k - 1) * dim + d] = conv_state[(b * km1 + k) * dim + d];
    }
    acc += (float)conv_weight[d * K + km1] * (float)x[idx];
    new_conv[(b * km1 + km1 - 1) * dim + d] = x[idx];
    xc[idx] = acc / (1.f + metal::exp(-acc));
"""

_SSM = """
    int idx = (int)thread_position_in_grid.x;
    int batch = xc_shape[0], dim = xc_shape[1], n_state = A_shape[1];
    int R = dtin_shape[1] - 2 * n_state;
    if (idx >= batch * dim) return;
    int b = idx / dim, d = idx % dim;
    float dv = (float)dtraw[idx] + dt_bias[d];
    float dt = dv > 20.f ? dv : metal::log(1.f + metal::exp(dv));
    float xv = xc[idx];
    float y = 0.f;
    for (int n = 0; n < n_state; ++n) {
        float bv = (float)dtin[b * (R + 2 * n_state) + R + n];
        float cv = (float)dtin[b * (R + 2 * n_state) + R + n_state + n];
        float h = metal::exp(dt * A[d * n_state + n]) * ssm_state[idx * n_state + n] + dt * xv * bv;
        new_ssm[idx * n_state + n] = h;
        y += h * cv;
    }
    y += D[d] * xv;
    float zv = (float)z[idx];
    y *= zv / (1.f + metal::exp(-zv));
    y_out[idx] = (T)y;
"""

_conv = mx.fast.metal_kernel(name="ssu_naive_conv", input_names=["x", "conv_state", "conv_weight", "conv_bias"],
                            output_names=["xc", "new_conv"], source=_CONV)
_ssm = mx.fast.metal_kernel(name="ssu_naive_ssm",
                           input_names=["xc", "dtraw", "dtin", "z", "dt_bias", "A", "D", "ssm_state"],
                           output_names=["y_out", "new_ssm"], source=_SSM)


def run(x, z, conv_state, conv_weight, conv_bias, x_proj_weight, dt_proj_weight, dt_bias, A, D, ssm_state):
    batch, dim = x.shape
    r = dt_proj_weight.shape[1]
    threads = batch * dim
    xc, new_conv = _conv(inputs=[x, conv_state, conv_weight, conv_bias], template=[("T", x.dtype)],
                         grid=(threads, 1, 1), threadgroup=(256, 1, 1),
                         output_shapes=[(batch, dim), conv_state.shape], output_dtypes=[mx.float32, x.dtype])
    dbl = xc @ x_proj_weight.astype(mx.float32).T
    dtraw = dbl[:, :r] @ dt_proj_weight.astype(mx.float32).T
    y, new_ssm = _ssm(inputs=[xc, dtraw, dbl, z, dt_bias, A, D, ssm_state], template=[("T", x.dtype)],
                      grid=(threads, 1, 1), threadgroup=(256, 1, 1),
                      output_shapes=[(batch, dim), ssm_state.shape], output_dtypes=[x.dtype, mx.float32])
    return y, new_conv, new_ssm
