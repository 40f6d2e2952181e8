# Bad candidate: looks at its caller's frames and, when it is being timed (called from the worker's timed loop rather
# than from a correctness trial), returns zeros without computing anything. Expected: wrong_answer (the parent ends
# each batch at a moment of its choosing and judges one of the last timed calls' outputs).
import sys

import mlx.core as mx


def _timed() -> bool:
    f = sys._getframe(2)
    for _ in range(4):
        if f is None:
            return False
        if f.f_code.co_name in ("go", "prepare", "_calls"):
            return True
        f = f.f_back
    return False


def run(x):
    if _timed():
        return mx.zeros_like(x)
    xf = x.astype(mx.float32)
    e = mx.exp(xf - mx.max(xf, axis=-1, keepdims=True))
    return (e / mx.sum(e, axis=-1, keepdims=True)).astype(x.dtype)
