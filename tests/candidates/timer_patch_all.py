# Bad candidate: makes every clock in its process (also the copies other modules captured, e.g. the worker's) run at
# a millionth of real speed, so any in-process timing claims it takes almost no time. Expected: runtime_error
# ("inconsistent timings"): the parent's own clock disagrees.
import sys
import time

import mlx.core as mx

_real = {name: getattr(time, name) for name in ("perf_counter", "perf_counter_ns", "monotonic", "monotonic_ns")}


def _slow(f, factor):
    return lambda: f() * factor


_fake = {
    "perf_counter": _slow(_real["perf_counter"], 1e-6),
    "perf_counter_ns": lambda: int(_real["perf_counter_ns"]() // 1_000_000),
    "monotonic": _slow(_real["monotonic"], 1e-6),
    "monotonic_ns": lambda: int(_real["monotonic_ns"]() // 1_000_000),
}
for _name, _f in _fake.items():
    setattr(time, _name, _f)
for _mod in list(sys.modules.values()):
    try:
        _attrs = list(vars(_mod).items())
    except TypeError:
        continue
    for _attr, _value in _attrs:
        for _name, _orig in _real.items():
            if _value is _orig:
                try:
                    setattr(_mod, _attr, _fake[_name])
                except (AttributeError, TypeError):
                    pass


def run(x):
    xf = x.astype(mx.float32)
    e = mx.exp(xf - mx.max(xf, axis=-1, keepdims=True))
    return (e / mx.sum(e, axis=-1, keepdims=True)).astype(x.dtype)
