# Naive MLX-ops decode step (float32 throughout), the starting candidate on mlx-cpu.
import mlx.core as mx


def run(x, z, conv_state, conv_weight, conv_bias, x_proj_weight, dt_proj_weight, dt_bias, A, D, ssm_state):
    f32 = mx.float32
    n = A.shape[1]
    r = dt_proj_weight.shape[1]
    window = mx.concatenate([conv_state, x[:, None]], axis=1)
    xc = mx.sum(window.astype(f32) * conv_weight.astype(f32).T[None], axis=1) + conv_bias.astype(f32)
    xc = xc * mx.sigmoid(xc)
    dbl = xc @ x_proj_weight.astype(f32).T
    d = dbl[:, :r] @ dt_proj_weight.astype(f32).T + dt_bias
    dt = mx.where(d > 20.0, d, mx.log1p(mx.exp(mx.minimum(d, 20.0))))
    b, c = dbl[:, r:r + n], dbl[:, r + n:]
    h = mx.exp(dt[..., None] * A) * ssm_state + (dt * xc)[..., None] * b[:, None, :]
    y = mx.sum(h * c[:, None, :], axis=-1) + D * xc
    zf = z.astype(f32)
    y = y * zf * mx.sigmoid(zf)
    return y.astype(x.dtype), window[:, 1:], h
