"""Deterministic input generation: every process builds bit-identical inputs for a (task, workload, seed).

MLX's counter-based random generator is used (not NumPy) because timing pools of several GB must be built on the device
in milliseconds; determinism across processes of one backend is what the harness relies on, and it checks it by digest.
"""

from __future__ import annotations

import zlib
from typing import Any

from ksearch.tasks.base import Task, TensorSpec, Workload


def _mx() -> Any:
    import mlx.core as mx

    return mx


def tensor_key(seed: int, workload: Workload, spec: TensorSpec) -> Any:
    mx = _mx()
    salt = zlib.crc32(f"{workload.name}/{spec.name}".encode())
    return mx.random.key((int(seed) * 1_000_003 + salt) % (2**63))


#: Inits drawn from a standard normal; the others (uniform, positive, negative) from a standard uniform on [0, 1).
NORMAL_INITS = ("normal",)
INITS = ("normal", "uniform", "positive", "negative", "zeros")


def shaped(spec: TensorSpec, standard: Any) -> Any:
    """Values distributed as `spec.init` says, from standard ones (normal for NORMAL_INITS, uniform otherwise), in
    float32: a new array."""
    if spec.init in ("normal", "uniform"):
        return standard * spec.scale
    if spec.init == "positive":
        return (standard + 0.5) * spec.scale
    if spec.init == "negative":
        return -(standard * spec.scale + 0.1)
    raise ValueError(f"tensor {spec.name!r}: unknown init {spec.init!r} ({', '.join(INITS)})")


def draw(spec: TensorSpec, shape: tuple[int, ...], key: Any, dtype: str) -> Any:
    """Values of `shape` distributed as `spec.init` says, from an explicit key (counter-based: the same key gives the
    same values in every process of one backend)."""
    mx = _mx()
    if spec.init == "zeros":
        x = mx.zeros(shape)
    elif spec.init in NORMAL_INITS:
        x = shaped(spec, mx.random.normal(shape, key=key))
    else:  # shaped refuses an unknown init
        x = shaped(spec, mx.random.uniform(shape=shape, key=key))
    return x.astype(getattr(mx, dtype))


def make_tensor(spec: TensorSpec, workload: Workload, seed: int) -> Any:
    return draw(spec, spec.resolved_shape(workload), tensor_key(seed, workload, spec), spec.resolved_dtype(workload))


def make_inputs(task: Task, workload: Workload, seed: int) -> dict[str, Any]:
    """The inputs of one call, evaluated. Custom generators must be deterministic in (workload, seed) too."""
    mx = _mx()
    if task.generator is not None:
        arrays = task.generator(workload, seed)
    else:
        arrays = {spec.name: make_tensor(spec, workload, seed) for spec in task.inputs}
    mx.eval(list(arrays.values()))
    return arrays
