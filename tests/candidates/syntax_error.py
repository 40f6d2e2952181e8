# Bad candidate: does not parse. Expected: compile_error.
import mlx.core as mx


def run(x)
    return mx.zeros_like(x)
