# Bad candidate: tries the native op (by a computed name), swallows the error and falls back to honest ops.
# Expected: forbidden (the tripwire reports the call on a private channel before it raises).
import mlx.core as mx


def run(x):
    try:
        return getattr(mx, "".join(["soft", "max"]))(x, axis=-1)
    except Exception:
        xf = x.astype(mx.float32)
        e = mx.exp(xf - mx.max(xf, axis=-1, keepdims=True))
        return (e / mx.sum(e, axis=-1, keepdims=True)).astype(x.dtype)
