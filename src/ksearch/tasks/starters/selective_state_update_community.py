# mlx-lm's per-token Mamba path (MambaBlock._process_sequence with T == 1), all MLX ops in the workload dtype.
import mlx.core as mx
import mlx.nn as nn


def run(x, z, conv_state, conv_weight, conv_bias, x_proj_weight, dt_proj_weight, dt_bias, A, D, ssm_state):
    dtype = x.dtype
    n = A.shape[1]
    r = dt_proj_weight.shape[1]
    dim = x.shape[1]
    x_full = mx.concatenate([conv_state, x[:, None]], axis=1)
    conv_out = mx.conv1d(x_full, conv_weight[:, :, None], groups=dim) + conv_bias
    xc = nn.silu(conv_out)[:, 0]
    delta, B, C = mx.split(xc @ x_proj_weight.T, [r, r + n], axis=-1)
    delta = nn.softplus(delta @ dt_proj_weight.T + dt_bias.astype(dtype))
    new_state = mx.expand_dims(delta * xc, -1) * mx.expand_dims(B, 1)
    new_state = new_state + ssm_state * mx.exp(mx.expand_dims(delta, -1) * A)
    y = (new_state @ mx.expand_dims(C, -1)).squeeze(2)
    y = y + D * xc
    y = y * nn.silu(z)
    return y.astype(dtype), x_full[:, 1:], new_state.astype(mx.float32)
