# Bad candidate: calls the task's native op. Expected: forbidden (found statically).
import mlx.core as mx


def run(x):
    return mx.softmax(x, axis=-1)
