import math

import mlx.core as mx


def run(q, k_cache, v_cache, length):
    b, hq, _, d = q.shape
    hkv = k_cache.shape[1]
    k = k_cache[:, :, :length].astype(mx.float32)
    v = v_cache[:, :, :length].astype(mx.float32)
    qg = q.astype(mx.float32).reshape(b, hkv, hq // hkv, d) * (1.0 / math.sqrt(d))
    s = qg @ k.transpose(0, 1, 3, 2)
    p = mx.exp(s - mx.max(s, axis=-1, keepdims=True))
    o = (p / mx.sum(p, axis=-1, keepdims=True)) @ v
    return o.reshape(b, hq, 1, d).astype(q.dtype)
