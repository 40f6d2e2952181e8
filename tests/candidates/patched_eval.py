# Bad candidate: makes mx.eval and mx.synchronize no-ops in its process, so a timed call only builds a lazy graph
# (the trials still pass: shipping the outputs forces them). Expected: honest timing (the worker captured mx.eval
# and mx.synchronize before the candidate was imported), so no absurd speedup.
import mlx.core as mx

mx.eval = lambda *a, **k: None
mx.synchronize = lambda *a, **k: None
mx.async_eval = lambda *a, **k: None


def run(x):
    xf = x.astype(mx.float32)
    e = mx.exp(xf - mx.max(xf, axis=-1, keepdims=True))
    return (e / mx.sum(e, axis=-1, keepdims=True)).astype(x.dtype)
