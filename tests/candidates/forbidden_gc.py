# Bad candidate: digs the native op's original function object out of the garbage collector, past the tripwire.
# Expected: forbidden.
import gc

import mlx.core as mx

_name = "soft" + "max"
_op = None
for _o in gc.get_objects():
    if callable(_o) and getattr(_o, "__name__", "") == _name and getattr(_o, "__module__", "") == "mlx.core":
        _op = _o
        break
if _op is None:
    _op = getattr(mx, _name)


def run(x):
    return _op(x, axis=-1)
