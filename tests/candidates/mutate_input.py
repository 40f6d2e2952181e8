# Bad candidate (selective_scan): computes the right answer, then zeroes its input u. Expected: wrong_answer.
import mlx.core as mx


def run(u, delta, A, B, C, D, z, delta_bias):
    f32 = mx.float32
    batch, dim, length = u.shape
    uf, zf = u.astype(f32), z.astype(f32)
    d = delta.astype(f32) + delta_bias[None, :, None]
    dt = mx.where(d > 20.0, d, mx.log1p(mx.exp(mx.minimum(d, 20.0))))
    Bf, Cf = B.astype(f32), C.astype(f32)
    x = mx.zeros((batch, dim, A.shape[1]), dtype=f32)
    ys = []
    for t in range(length):
        dt_t = dt[:, :, t][..., None]
        x = mx.exp(dt_t * A[None]) * x + dt_t * Bf[:, None, :, t] * uf[:, :, t][..., None]
        ys.append(mx.sum(x * Cf[:, None, :, t], axis=-1))
    y = mx.stack(ys, axis=-1) + D[None, :, None] * uf
    y = y * (zf * mx.sigmoid(zf))
    y = y.astype(u.dtype)
    mx.eval(y, x)
    u[:] = 0  # MLX 0.32.0 and older cannot assign through an Ellipsis
    return y, x
