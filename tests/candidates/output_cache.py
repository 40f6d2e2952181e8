# Bad candidate: computes the first call honestly, then returns that result forever. Expected: wrong_answer.
import mlx.core as mx

_cache = {}


def run(x):
    if "out" not in _cache:
        xf = x.astype(mx.float32)
        e = mx.exp(xf - mx.max(xf, axis=-1, keepdims=True))
        _cache["out"] = (e / mx.sum(e, axis=-1, keepdims=True)).astype(x.dtype)
    return _cache["out"]
