# Bad candidate: NaN everywhere. Expected: wrong_answer.
import mlx.core as mx


def run(x):
    return mx.full(x.shape, float("nan"), dtype=x.dtype)
