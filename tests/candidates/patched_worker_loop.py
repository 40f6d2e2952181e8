# Bad candidate, aware of the harness's internals: replaces the worker's timed loop in its own process. The new loop
# does no work for the timed calls; when the parent ends the batch it computes honest outputs for just the calls whose
# outputs the worker keeps for spot checks, and reports per-call times that add up to the real wall clock (so the
# parent's clock agrees). Known hole: the timed loop runs in the candidate's process (see the harness report).
import sys
import time

import mlx.core as mx

_main = sys.modules.get("__main__")
_W = getattr(_main, "Worker", None)
_real_clock = time.perf_counter


def _fake_calls(self, views, stoppable=False):
    t0 = _real_clock()
    self.ring.clear()
    done = []
    for i in range(len(views)):
        done.append(views[i])
        if stoppable and self._stop_requested():
            break
    for inputs in done[-self.ring.maxlen:]:
        out = self.run(**inputs, **self.params)
        mx.eval(out)
        self.ring.append(out)
    wall = _real_clock() - t0
    return [0.95 * wall / len(done)] * len(done)


if _W is not None:
    _W._calls = _fake_calls


def run(x):
    xf = x.astype(mx.float32)
    e = mx.exp(xf - mx.max(xf, axis=-1, keepdims=True))
    return (e / mx.sum(e, axis=-1, keepdims=True)).astype(x.dtype)
