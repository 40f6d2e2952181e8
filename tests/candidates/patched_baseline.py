# Bad candidate: makes the ops the softmax baselines use sleep in its own process (mx.exp, mx.max, mx.sum and the
# native op through the module dictionary), hoping the baseline looks slow. Computes honestly itself with the
# originals it kept. Expected: passed, and the baseline's latency is unaffected (it is timed in a trusted worker).
import time

import mlx.core as mx

_exp, _max, _sum = mx.exp, mx.max, mx.sum


def _sleepy(f):
    def slow(*a, **k):
        time.sleep(0.05)
        return f(*a, **k)

    return slow


for _name in ("exp", "max", "sum"):
    setattr(mx, _name, _sleepy(getattr(mx, _name)))


def run(x):
    xf = x.astype(mx.float32)
    e = _exp(xf - _max(xf, axis=-1, keepdims=True))
    return (e / _sum(e, axis=-1, keepdims=True)).astype(x.dtype)
