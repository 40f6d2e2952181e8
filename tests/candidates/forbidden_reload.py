# Bad candidate: reloads mlx.core hoping to get the native op back from under the run-time tripwire, then calls it
# through a computed name. Expected: forbidden.
import importlib

import mlx.core as mx

_fresh = importlib.reload(mx)
_op = getattr(_fresh, "soft" + "max")


def run(x):
    return _op(x, axis=-1)
