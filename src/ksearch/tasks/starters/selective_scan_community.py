# Per-token loop in the style of mlx-lm's Mamba ssm_step: state updated token by token in the workload dtype.
import mlx.core as mx
import mlx.nn as nn


def run(u, delta, A, B, C, D, z, delta_bias):
    dtype = u.dtype
    dt = nn.softplus(delta + delta_bias[None, :, None].astype(dtype))
    Ad = A.astype(dtype)
    state = None
    ys = []
    for t in range(u.shape[-1]):
        dt_t = dt[:, :, t]
        new_state = mx.expand_dims(dt_t * u[:, :, t], -1) * mx.expand_dims(B[:, :, t], 1)
        if state is not None:
            new_state = new_state + state * mx.exp(mx.expand_dims(dt_t, -1) * Ad)
        state = new_state
        y = (state @ mx.expand_dims(C[:, :, t], -1)).squeeze(-1)
        ys.append(y + D.astype(dtype) * u[:, :, t])
    y = mx.stack(ys, axis=-1)
    return y * nn.silu(z), state.astype(mx.float32)
