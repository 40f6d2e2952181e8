import math

import mlx.core as mx


def run(q, k, v, causal):
    b, hq, length, d = q.shape
    group = hq // k.shape[1]
    s = k.shape[2]
    kf = mx.repeat(k, group, axis=1).astype(mx.float32)
    vf = mx.repeat(v, group, axis=1).astype(mx.float32)
    scores = (q.astype(mx.float32) @ kf.transpose(0, 1, 3, 2)) * (1.0 / math.sqrt(d))
    if causal:
        keep = mx.arange(s)[None, :] <= mx.arange(length)[:, None] + (s - length)
        scores = mx.where(keep, scores, -mx.inf)
    m = mx.max(scores, axis=-1, keepdims=True)
    p = mx.exp(scores - m)
    return ((p / mx.sum(p, axis=-1, keepdims=True)) @ vf).astype(q.dtype)
