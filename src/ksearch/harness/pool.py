"""The inputs of timed calls: a pool of input sets laid out as callers lay them out, made new for every call.

Every tensor a timed call receives is a standalone, row-contiguous allocation of its own shape (a KV cache is a whole
(B, H, capacity, D) buffer, as mlx-lm preallocates it), never a view into a larger buffer: kernels, MLX's own included,
pick their fast paths by layout, and views of a rotated flat buffer had pushed MLX's attention onto a path that copies
the cache first (a decode baseline twice as slow as in a real model).

What the defences against memoisation need is kept without changing that layout:
- set k of the pool is the base inputs rotated by k * 256 bytes, as a copy (P distinct contents for one draw of the
  generator);
- before every call, each large tensor of the set gets one fresh value per row (the "stamp": one column per row, the
  columns and a value per row fixed per set, that value times the call's factor, 0.5 to 1.5), and each small tensor
  is drawn anew whole (one draw of standard values for all of a call's small tensors, shaped per tensor). The factor
  and the draw come from the batch key, which the parent reveals only when the batch starts, and the call's index.
  Every output row depends on its stamped inputs, so no two calls see the same contents, and a candidate cannot
  compute a call before its batch starts; small tensors are not scaled copies of the set's (a function homogeneous in
  them could otherwise be served from one cached result times a power of the factor). A call's stamps cost two device
  operations per large tensor, two or three per small one and a few for the call: drawing every tensor's values anew,
  ten or so operations per tensor, took 220-1,300 us a call on the H200 (`benchmarks/harness_gaps.py`), several
  times the calls being timed;
- every call gets new array objects (the stamp is a scatter into the set's buffer, in place when nothing else holds
  it).
The reference worker rebuilds any call's inputs from (seed, set, batch key, call) alone: `call_inputs`.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass
from typing import Any

from ksearch.tasks.base import Task, TensorSpec, Workload

#: Rotation step between pool sets, in bytes: an alignment that vector loads keep.
SHIFT_BYTES = 256
#: Tensors of at most this many elements are drawn anew, whole, for every call.
SMALL = 4096
_FLOATS = ("float32", "float16", "bfloat16")


def key_for(*parts: object) -> int:
    """A 63-bit key for mx.random.key from any parts (stable across processes, unlike hash())."""
    h = hashlib.blake2b("/".join(str(p) for p in parts).encode(), digest_size=8).digest()
    return int.from_bytes(h, "little") >> 1


def _kind(task: Task, spec: TensorSpec | None, workload: Workload) -> str:
    """stamp | draw | keep (a custom generator's structured inputs are kept as they are: new objects only)."""
    if task.generator is not None or spec is None or spec.init == "zeros":
        return "keep"
    if spec.resolved_dtype(workload) not in _FLOATS:
        return "keep"
    return "draw" if math.prod(spec.resolved_shape(workload)) <= SMALL else "stamp"


def _specs(task: Task) -> dict[str, TensorSpec]:
    return {s.name: s for s in task.inputs}


def set_inputs(task: Task, workload: Workload, seed: int, k: int,
               base: dict[str, Any] | None = None) -> dict[str, Any]:
    """Set k of the pool before any stamp: the generator's inputs for `seed` (`base`, when the caller has them),
    each tensor's flat contents rotated left by k * SHIFT_BYTES, every tensor a fresh contiguous array (a custom
    generator: its own draw per set)."""
    import mlx.core as mx

    from ksearch.tasks.inputs import make_inputs

    if task.generator is not None:
        return make_inputs(task, workload, key_for(seed, "set", k) if k else seed)
    if base is None:
        base = make_inputs(task, workload, seed)
    if k == 0:
        return base
    out = {}
    for name, v in base.items():
        step = max(1, SHIFT_BYTES // max(1, v.itemsize))
        off = (k * step) % v.size if v.size else 0
        out[name] = mx.roll(v.reshape(-1), -off).reshape(v.shape) if off else mx.array(v)
    mx.eval(list(out.values()))
    return out


def _rows(v: Any) -> tuple[int, int]:
    cols = v.shape[-1] if v.ndim else 1
    return v.size // max(1, cols), cols


#: A call's factor lies in [FACTOR_LOW, FACTOR_LOW + 1): positive, so a stamped value keeps its sign (A of the Mamba
#: tasks must stay negative), and within a factor of two of the set's own, so the inputs keep their scale.
FACTOR_LOW = 0.5


def call_factor(batch_key: int, call: int) -> float:
    """The factor of timed call `call` of the batch keyed `batch_key` (the same in every process)."""
    return FACTOR_LOW + key_for(batch_key, call, "factor") / float(1 << 63)


@dataclass(frozen=True)
class Fresh:
    """A small tensor drawn anew whole for every call."""

    spec: TensorSpec
    shape: tuple[int, ...]
    dtype: Any


def set_stamps(task: Task, workload: Workload, seed: int, k: int, inputs: dict[str, Any]) -> dict[str, Any]:
    """What set k's calls are stamped from, per tensor that gets stamps: (columns, values) for a large tensor (one
    column per row, uint32 of shape (rows, 1), and that row's value, of the tensor's dtype), its spec, shape and dtype
    for a small one (drawn anew whole for every call: `refresh`)."""
    import mlx.core as mx

    from ksearch.tasks.inputs import draw

    specs = _specs(task)
    stamps: dict[str, Any] = {}
    for name, v in inputs.items():
        spec = specs.get(name)
        kind = _kind(task, spec, workload)
        if kind == "draw" and spec is not None:
            stamps[name] = Fresh(spec, tuple(v.shape), v.dtype)
        elif kind == "stamp" and spec is not None:
            rows, width = _rows(v)
            cols = mx.random.randint(0, width, (rows, 1), key=mx.random.key(key_for(seed, "columns", k, name)))
            values = draw(spec, (rows, 1), mx.random.key(key_for(seed, "values", k, name)),
                          spec.resolved_dtype(workload))
            stamps[name] = (cols.astype(mx.uint32), values)
    mx.eval([a for s in stamps.values() if isinstance(s, tuple) for a in s])
    return stamps


def _fresh_values(fresh: dict[str, Fresh], batch_key: int, call: int) -> dict[str, Any]:
    """Every small tensor of one call, from one draw of standard normal and one of standard uniform values (each
    tensor shaped from its slice, cast, standalone), rather than a draw of its own."""
    import mlx.core as mx

    from ksearch.tasks.inputs import NORMAL_INITS, shaped

    normal = [n for n, f in fresh.items() if f.spec.init in NORMAL_INITS]
    uniform = [n for n in fresh if n not in normal]
    out = {}
    for names, which in ((normal, "normal"), (uniform, "uniform")):
        if not names:
            continue
        sizes = [math.prod(fresh[n].shape) for n in names]
        key = mx.random.key(key_for(batch_key, call, which))
        block = (mx.random.normal((sum(sizes),), key=key) if which == "normal"
                 else mx.random.uniform(shape=(sum(sizes),), key=key))
        start = 0
        for name, size in zip(names, sizes, strict=True):
            f = fresh[name]
            out[name] = shaped(f.spec, block[start:start + size]).astype(f.dtype).reshape(f.shape)
            start += size
    return out


def refresh(inputs: dict[str, Any], stamps: dict[str, Any], batch_key: int, call: int) -> dict[str, Any]:
    """The inputs of timed call `call`: set `inputs` with this call's stamps (lazy; new objects throughout). The caller
    drops its own references to `inputs` before evaluating, so the scatters reuse the set's buffers."""
    import mlx.core as mx

    factor = call_factor(batch_key, call)
    drawn = _fresh_values({n: s for n, s in stamps.items() if isinstance(s, Fresh)}, batch_key, call)
    out = {}
    for name, v in inputs.items():
        stamp = stamps.get(name)
        if name in drawn:
            out[name] = drawn[name]
        elif isinstance(stamp, tuple):
            cols, values = stamp
            rows, width = _rows(v)
            out[name] = mx.put_along_axis(v.reshape(rows, width), cols, values * factor, axis=1).reshape(v.shape)
        else:
            out[name] = v.reshape(v.shape)  # a new object over the same buffer, same layout
    return out


def call_inputs(task: Task, workload: Workload, seed: int, sets: int, batch_key: int, call: int,
                base: dict[str, Any] | None = None) -> dict[str, Any]:
    """Timed call `call`'s inputs rebuilt from scratch (the reference worker's way; `base`: the generator's inputs
    for `seed`, when the caller kept them), evaluated: equal to what the pool handed that call."""
    import mlx.core as mx

    k = call % sets
    base = set_inputs(task, workload, seed, k, base)
    stamps = set_stamps(task, workload, seed, k, base)
    out = refresh(base, stamps, batch_key, call)
    mx.eval(list(out.values()))
    return out


class TimingPool:
    """The candidate's (or baseline's) pool: `sets` input sets, refreshed in place for each call."""

    def __init__(self, task: Task, workload: Workload, seed: int, sets: int) -> None:
        import mlx.core as mx

        self.task, self.workload, self.seed = task, workload, seed
        self.sets: list[dict[str, Any] | None] = []
        self.stamps: list[dict[str, Any]] = []
        base = set_inputs(task, workload, seed, 0)
        for k in range(sets):
            s = set_inputs(task, workload, seed, k, base) if k else base
            self.stamps.append(set_stamps(task, workload, seed, k, s))
            self.sets.append(s)
        mx.eval([v for s in self.sets if s for v in s.values()])

    def take(self, batch_key: int, call: int) -> dict[str, Any]:
        """Call `call`'s inputs (lazy): the set's previous arrays are handed over to the scatters, so that they update
        the buffers in place when the previous call's candidate kept no reference to them."""
        k = call % len(self.sets)
        current, self.sets[k] = self.sets[k], None
        assert current is not None
        fresh = refresh(current, self.stamps[k], batch_key, call)
        current.clear()  # the scatters now hold the set's only references: they update its buffers in place
        self.sets[k] = fresh
        return dict(fresh)

    def release(self) -> None:
        self.sets = []
        self.stamps = []
