import mlx.core as mx


def run(x):
    xf = x.astype(mx.float32)
    m = mx.max(xf, axis=-1, keepdims=True)
    e = mx.exp(xf - m)
    return (e / mx.sum(e, axis=-1, keepdims=True)).astype(x.dtype)
