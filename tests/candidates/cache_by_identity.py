# Bad candidate: remembers its result per input object (id) and returns it when the same object comes back, as the
# timing pool's input sets do when they are reused. Correct on fresh inputs, so correctness trials pass; it only
# skips work when timed. Expected: its timed calls do the work (the harness hands every call fresh array objects),
# so no absurd speedup.
import mlx.core as mx

_memo: dict[int, tuple[object, object]] = {}


def run(x):
    hit = _memo.get(id(x))
    if hit is not None and hit[0] is x:
        return hit[1]
    xf = x.astype(mx.float32)
    e = mx.exp(xf - mx.max(xf, axis=-1, keepdims=True))
    out = (e / mx.sum(e, axis=-1, keepdims=True)).astype(x.dtype)
    _memo[id(x)] = (x, out)
    return out
