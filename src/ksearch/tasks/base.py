"""What a kernel task declares: tensors, workloads, tolerances, reference, baselines, cost model.

Everything here is plain data plus a few callables, so that a user's task file is a short Python module that builds one
`Task` and exports it as `TASK`. Nothing in this module imports MLX at import time: the parent (judging) process must be
able to read a task without loading a GPU runtime.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

Tier = Literal["cpu", "gpu"]
Split = Literal["search", "holdout"]

#: Default tolerances per dtype (atol, rtol); a task may override any of them.
DEFAULT_TOLERANCES: dict[str, tuple[float, float]] = {
    "float32": (1e-4, 1e-4),
    "float16": (1e-2, 1e-2),
    "bfloat16": (2e-2, 2e-2),
}

#: A task's name is part of the name of each of its runs' directories: no path separator, no leading dot, short.
NAME_RULE = "letters, digits, _, - and . only, starting with a letter or digit, at most 64 characters"
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")


def name_problem(name: object) -> str | None:
    """Why `name` cannot name a task (None: it can), as the end of a sentence naming it."""
    if isinstance(name, str) and _NAME.fullmatch(name):
        return None
    return f"is not a task name: use {NAME_RULE}"


BYTES_PER_DTYPE = {"float32": 4, "float16": 2, "bfloat16": 2, "int32": 4, "uint32": 4, "bool": 1}


@dataclass(frozen=True)
class TensorSpec:
    """An input or output tensor. `dtype` is a concrete dtype name or "workload" (the workload's dtype)."""

    name: str
    shape: tuple[str, ...]
    dtype: str = "workload"
    #: How the generator fills it: normal, uniform, negative (for A), positive, small (scaled normal), zeros.
    init: str = "normal"
    scale: float = 1.0

    def resolved_dtype(self, workload: Workload) -> str:
        return workload.dtype if self.dtype == "workload" else self.dtype

    def resolved_shape(self, workload: Workload) -> tuple[int, ...]:
        try:
            return tuple(workload.axes[a] for a in self.shape)
        except KeyError as exc:
            raise ValueError(f"tensor {self.name!r} uses axis {exc.args[0]!r} that workload {workload.name!r} lacks") from exc

    def nbytes(self, workload: Workload) -> int:
        return math.prod(self.resolved_shape(workload)) * BYTES_PER_DTYPE[self.resolved_dtype(workload)]


@dataclass(frozen=True)
class Workload:
    """One concrete problem: axis sizes, dtype, scalar parameters (passed to `run` as keywords)."""

    name: str
    axes: Mapping[str, int]
    dtype: str = "float32"
    params: Mapping[str, bool | int | float] = field(default_factory=dict)
    split: Split = "search"
    tier: Tier = "cpu"

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "axes": dict(self.axes),
            "dtype": self.dtype,
            "params": dict(self.params),
            "split": self.split,
            "tier": self.tier,
        }


@dataclass(frozen=True)
class Baseline:
    """A named baseline: a trusted candidate source per backend family ("cpu", "cuda", "metal", or "any")."""

    name: str
    sources: Mapping[str, str]
    description: str = ""

    def source_for(self, backend_family: str) -> str | None:
        return self.sources.get(backend_family) or self.sources.get("any")


@dataclass
class Task:
    """A kernel to optimise. A task file exports one as TASK: tests/data/user_task.py is a complete example (README, "A
    short tour")."""

    name: str
    kind: str
    description: str
    inputs: list[TensorSpec]
    outputs: list[TensorSpec]
    workloads: list[Workload]
    #: reference(inputs: dict of mx.array in float32, **params) -> tuple of outputs (float32). Runs in a trusted worker.
    reference: Callable[..., Any]
    #: flops(workload) and bytes(workload): the physical model used for roofline fractions and the timing floor.
    flops: Callable[[Workload], float]
    bytes_moved: Callable[[Workload], float]
    #: Dotted names candidates may not use, e.g. "mx.fast.scaled_dot_product_attention".
    forbidden: tuple[str, ...] = ()
    baselines: dict[str, Baseline] = field(default_factory=dict)
    default_baseline: str = "naive"
    tolerances: dict[str, tuple[float, float]] = field(default_factory=dict)
    #: Optional custom generator(workload, seed) -> dict of mx.array; the default builds inputs from TensorSpec.init.
    generator: Callable[[Workload, int], dict[str, Any]] | None = None
    #: Where the task came from: a built-in name or a file path (workers re-load it from here).
    origin: str = ""
    #: (input name, output index): in a timed run each call after the first takes the previous call's output as that
    #: input, as a model's next layer takes this layer's output, so a run's calls wait for each other on the device
    #: (independent calls queued together may run side by side there). None: the calls are independent.
    chain: tuple[str, int] | None = None

    def __post_init__(self) -> None:
        if self.chain is None:
            return
        name, index = self.chain
        ins = {s.name: s for s in self.inputs}
        if name not in ins or not 0 <= index < len(self.outputs):
            raise ValueError(f"task {self.name!r}: chain={self.chain!r} names no input {name!r} or no output "
                             f"{index}; give (an input's name, an output's index)")
        out = self.outputs[index]
        if (ins[name].shape, ins[name].dtype) != (out.shape, out.dtype):
            raise ValueError(f"task {self.name!r}: chain={self.chain!r}: output {index} ({out.shape}, {out.dtype}) "
                             f"is not shaped as input {name!r} ({ins[name].shape}, {ins[name].dtype}); chain an "
                             "output to an input of its shape and dtype")

    # -- lookups ---------------------------------------------------------------------------------------------------
    def tolerance(self, dtype: str) -> tuple[float, float]:
        return self.tolerances.get(dtype, DEFAULT_TOLERANCES.get(dtype, (1e-4, 1e-4)))

    def workload(self, name: str) -> Workload:
        for w in self.workloads:
            if w.name == name:
                return w
        known = ", ".join(w.name for w in self.workloads)
        raise KeyError(f"task {self.name!r} has no workload {name!r}; known: {known}")

    def select_workloads(self, tier: Tier, holdout: bool = False, names: list[str] | None = None) -> list[Workload]:
        """The search workloads of a tier (plus its holdout ones with `holdout`), or exactly the named ones."""
        if names:
            return [self.workload(n) for n in names]
        split: set[str] = {"search", "holdout"} if holdout else {"search"}
        return [w for w in self.workloads if w.tier == tier and w.split in split]

    def holdout_workloads(self, tier: Tier) -> list[Workload]:
        return [w for w in self.workloads if w.tier == tier and w.split == "holdout"]

    def input_bytes(self, workload: Workload) -> int:
        return sum(t.nbytes(workload) for t in self.inputs)

    def output_bytes(self, workload: Workload) -> int:
        return sum(t.nbytes(workload) for t in self.outputs)

    def baseline(self, name: str | None) -> Baseline:
        key = name or self.default_baseline
        if key not in self.baselines:
            raise KeyError(f"task {self.name!r} has no baseline {key!r}; known: {', '.join(self.baselines)}")
        return self.baselines[key]

    def starting_source(self, backend_family: str) -> str:
        src = self.baseline("naive").source_for(backend_family)
        if src is None:
            raise KeyError(f"task {self.name!r} has no naive starting candidate for {backend_family}")
        return src

    def summary(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "kind": self.kind,
            "inputs": [{"name": t.name, "shape": list(t.shape), "dtype": t.dtype} for t in self.inputs],
            "outputs": [{"name": t.name, "shape": list(t.shape), "dtype": t.dtype} for t in self.outputs],
            "workloads": [w.to_json() for w in self.workloads],
            "forbidden": list(self.forbidden),
            "baselines": sorted(self.baselines),
            "default_baseline": self.default_baseline,
        }


def read_starter(name: str) -> str:
    """Source of a built-in starting/baseline candidate shipped in `ksearch/tasks/starters/`."""
    return (Path(__file__).parent / "starters" / name).read_text()
