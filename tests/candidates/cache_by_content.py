# Bad candidate: remembers its result per input fingerprint (a few values) and per buffer address, and returns it when
# the same input comes back, as the timing pool's sets do. Correct on fresh inputs, so correctness trials pass.
# Expected: timed calls never see the same input twice, so no absurd speedup.
import mlx.core as mx
import numpy as np

_memo = {}


def _key(x):
    a = np.array(x, copy=False)
    return (a.__array_interface__["data"][0], x.shape, tuple(a.reshape(-1)[:8].tolist()))


def run(x):
    key = _key(x)
    hit = _memo.get(key)
    if hit is not None:
        return hit
    xf = x.astype(mx.float32)
    e = mx.exp(xf - mx.max(xf, axis=-1, keepdims=True))
    out = (e / mx.sum(e, axis=-1, keepdims=True)).astype(x.dtype)
    if len(_memo) < 4096:
        _memo[key] = out
    return out
