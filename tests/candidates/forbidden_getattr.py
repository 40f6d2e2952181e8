# Bad candidate: reaches the native op through a computed name the AST cannot see. Expected: forbidden (run-time).
import mlx.core as mx

_op = getattr(mx, "soft" + "max")


def run(x):
    return _op(x, axis=-1)
