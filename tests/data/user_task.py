"""A complete user task: `ksearch eval tests/data/user_task.py candidate.py`.

A task file is a plain Python module that exports `TASK`. This one is a scaled add, out = x + alpha * y, with `alpha` a
scalar that belongs to each workload (it reaches `run` as a keyword, like the arrays). Everything a built-in task
declares is here: tensors with named axes, workloads per tier (search and holdout), the reference in MLX ops computed in
float32, a cost model, forbidden APIs and a naive baseline whose source is inline.
"""

from __future__ import annotations

from typing import Any

from ksearch.tasks import Baseline, Task, TensorSpec, Workload


def reference(inputs: dict[str, Any], alpha: float) -> tuple[Any]:
    # Inputs arrive as float32 copies; MLX is imported here so that reading the task never loads it.
    return (inputs["x"] + alpha * inputs["y"],)


NAIVE = '''
import mlx.core as mx


def run(x, y, alpha):
    return (x.astype(mx.float32) + alpha * y.astype(mx.float32)).astype(x.dtype)
'''

WORKLOADS = [
    Workload("cpu_256x512_f32", {"rows": 256, "cols": 512}, "float32", params={"alpha": 0.5}),
    Workload("cpu_128x1024_f16", {"rows": 128, "cols": 1024}, "float16", params={"alpha": -2.0}),
    Workload("cpu_100x300_f32", {"rows": 100, "cols": 300}, "float32", params={"alpha": 3.0}, split="holdout"),
    Workload("gpu_8192x4096_f16", {"rows": 8192, "cols": 4096}, "float16", params={"alpha": 0.5}, tier="gpu"),
]


def _bytes(w: Workload) -> float:
    return 3.0 * w.axes["rows"] * w.axes["cols"] * (4 if w.dtype == "float32" else 2)


TASK = Task(
    name="scaled_add",
    kind="elementwise",
    description="out = x + alpha * y, computed in float32, returned in x's dtype. run(x, y, alpha) -> out.",
    inputs=[TensorSpec("x", ("rows", "cols")), TensorSpec("y", ("rows", "cols"))],
    outputs=[TensorSpec("out", ("rows", "cols"))],
    workloads=WORKLOADS,
    reference=reference,
    flops=lambda w: 2.0 * w.axes["rows"] * w.axes["cols"],
    bytes_moved=_bytes,
    forbidden=("mx.addmm",),
    baselines={"naive": Baseline("naive", {"any": NAIVE}, "x + alpha * y in MLX ops")},
    default_baseline="naive",
)
