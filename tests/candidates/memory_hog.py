# Bad candidate: allocates ~3 GB on the first call and keeps it. Expected (with a 1 GB cap): runtime_error, memory.
import mlx.core as mx

_keep = []


def run(x):
    big = mx.ones((3 << 30) // 4, dtype=mx.float32)
    mx.eval(big)
    _keep.append(big)
    return mx.zeros_like(x)
