"""Row softmax: a small task that keeps tests fast and exercises reductions."""

from __future__ import annotations

from typing import Any

from ksearch.tasks.base import Baseline, Task, TensorSpec, Workload, read_starter


def reference(inputs: dict[str, Any]) -> tuple[Any]:
    import mlx.core as mx

    x = inputs["x"].astype(mx.float32)
    m = mx.max(x, axis=-1, keepdims=True)
    e = mx.exp(x - m)
    return (e / mx.sum(e, axis=-1, keepdims=True),)


def _elems(w: Workload) -> int:
    return w.axes["rows"] * w.axes["cols"]


def _bytes(w: Workload) -> float:
    return 2.0 * _elems(w) * (4 if w.dtype == "float32" else 2)


WORKLOADS = [
    Workload("cpu_256x1024_f32", {"rows": 256, "cols": 1024}, "float32", tier="cpu"),
    Workload("cpu_128x4096_f32", {"rows": 128, "cols": 4096}, "float32", tier="cpu"),
    Workload("cpu_256x1024_f16", {"rows": 256, "cols": 1024}, "float16", tier="cpu"),
    Workload("cpu_100x3000_f32", {"rows": 100, "cols": 3000}, "float32", split="holdout", tier="cpu"),
    Workload("gpu_4096x4096_f16", {"rows": 4096, "cols": 4096}, "float16", tier="gpu"),
    Workload("gpu_8192x1024_f32", {"rows": 8192, "cols": 1024}, "float32", tier="gpu"),
    Workload("gpu_2048x8192_f16", {"rows": 2048, "cols": 8192}, "float16", tier="gpu"),
    Workload("gpu_3000x5000_f32", {"rows": 3000, "cols": 5000}, "float32", split="holdout", tier="gpu"),
]

TASK = Task(
    name="softmax",
    kind="reduction",
    description="out[r, :] = exp(x[r, :] - max(x[r, :])) / sum(exp(x[r, :] - max(x[r, :]))), computed in float32, "
    "returned in x's dtype. run(x) -> out.",
    inputs=[TensorSpec("x", ("rows", "cols"), scale=3.0)],
    outputs=[TensorSpec("out", ("rows", "cols"))],
    workloads=WORKLOADS,
    reference=reference,
    flops=lambda w: 5.0 * _elems(w),
    bytes_moved=_bytes,
    forbidden=("mx.softmax", "mx.logsumexp", "nn.softmax", "nn.log_softmax"),
    baselines={
        "naive": Baseline(
            "naive",
            {"cpu": read_starter("softmax_cpu.py"), "cuda": read_starter("softmax_cuda.py"),
             "metal": read_starter("softmax_metal.py")},
            "the starting candidate: two-pass MLX ops on CPU, one thread per row on GPUs",
        ),
        "native": Baseline("native", {"any": read_starter("softmax_native.py")}, "mx.softmax(x, precise=True)"),
    },
    default_baseline="native",
    origin="softmax",
)
