# Candidate that patches only time.perf_counter (the worker captured its clock before importing the candidate, so
# this changes nothing the harness uses). Expected: passed, with honest timing.
import time

import mlx.core as mx

_real = time.perf_counter
time.perf_counter = lambda: _real() * 1e-6


def run(x):
    xf = x.astype(mx.float32)
    e = mx.exp(xf - mx.max(xf, axis=-1, keepdims=True))
    return (e / mx.sum(e, axis=-1, keepdims=True)).astype(x.dtype)
