# Bad candidate (gqa_decode, a chained task): when its query is the output it returned last (a timed run's calls after
# the first, Task.chain), it returns zeros without computing anything; every other call is right, so the correctness
# trials (single calls) pass. Expected: wrong_answer (the parent judges a chained timed call against the reference
# made from the previous call's committed output).
import math

import mlx.core as mx

_last = []


def run(q, k_cache, v_cache, length):
    if _last and _last[-1] is q:
        out = mx.zeros_like(q)
    else:
        b, hq, _, d = q.shape
        hkv = k_cache.shape[1]
        k = k_cache[:, :, :length].astype(mx.float32)
        v = v_cache[:, :, :length].astype(mx.float32)
        qg = q.astype(mx.float32).reshape(b, hkv, hq // hkv, d) * (1.0 / math.sqrt(d))
        s = qg @ k.transpose(0, 1, 3, 2)
        p = mx.exp(s - mx.max(s, axis=-1, keepdims=True))
        out = ((p / mx.sum(p, axis=-1, keepdims=True)) @ v).reshape(b, hq, 1, d).astype(q.dtype)
    _last[:] = [out]
    return out
