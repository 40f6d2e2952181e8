# Bad candidate: right values, transposed. Expected: wrong_shape.
import mlx.core as mx


def run(x):
    xf = x.astype(mx.float32)
    e = mx.exp(xf - mx.max(xf, axis=-1, keepdims=True))
    return (e / mx.sum(e, axis=-1, keepdims=True)).astype(x.dtype).T
