"""RMSNorm over the last axis with a weight: out = x * rsqrt(mean(x^2) + eps) * weight."""

from __future__ import annotations

from typing import Any

from ksearch.tasks.base import Baseline, Task, TensorSpec, Workload, read_starter

EPS = 1e-5


def reference(inputs: dict[str, Any]) -> tuple[Any]:
    import mlx.core as mx

    x = inputs["x"].astype(mx.float32)
    w = inputs["weight"].astype(mx.float32)
    r = mx.rsqrt(mx.mean(x * x, axis=-1, keepdims=True) + EPS)
    return (x * r * w,)


def _bytes(w: Workload) -> float:
    size = 4 if w.dtype == "float32" else 2
    return (2.0 * w.axes["rows"] * w.axes["dim"] + w.axes["dim"]) * size


WORKLOADS = [
    Workload("cpu_512x1024_f32", {"rows": 512, "dim": 1024}, "float32", tier="cpu"),
    Workload("cpu_256x4096_f32", {"rows": 256, "dim": 4096}, "float32", tier="cpu"),
    Workload("cpu_512x1024_f16", {"rows": 512, "dim": 1024}, "float16", tier="cpu"),
    Workload("cpu_300x2000_f32", {"rows": 300, "dim": 2000}, "float32", split="holdout", tier="cpu"),
    Workload("gpu_8192x4096_f16", {"rows": 8192, "dim": 4096}, "float16", tier="gpu"),
    Workload("gpu_16384x1024_f32", {"rows": 16384, "dim": 1024}, "float32", tier="gpu"),
    Workload("gpu_4096x8192_bf16", {"rows": 4096, "dim": 8192}, "bfloat16", tier="gpu"),
    Workload("gpu_5000x3000_f16", {"rows": 5000, "dim": 3000}, "float16", split="holdout", tier="gpu"),
]

TASK = Task(
    name="rmsnorm",
    kind="reduction",
    description=f"out = x * rsqrt(mean(x*x, axis=-1) + {EPS}) * weight, in float32, returned in x's dtype. "
    "run(x, weight) -> out; x (rows, dim), weight (dim,).",
    inputs=[TensorSpec("x", ("rows", "dim")), TensorSpec("weight", ("dim",), init="positive")],
    outputs=[TensorSpec("out", ("rows", "dim"))],
    workloads=WORKLOADS,
    reference=reference,
    flops=lambda w: 4.0 * w.axes["rows"] * w.axes["dim"],
    bytes_moved=_bytes,
    forbidden=("mx.fast.rms_norm", "nn.RMSNorm", "nn.rms_norm"),
    baselines={
        "naive": Baseline(
            "naive",
            {"cpu": read_starter("rmsnorm_cpu.py"), "cuda": read_starter("rmsnorm_cuda.py"),
             "metal": read_starter("rmsnorm_metal.py")},
            "the starting candidate: MLX ops on CPU, one thread per row on GPUs",
        ),
        "native": Baseline("native", {"any": read_starter("rmsnorm_native.py")}, "mx.fast.rms_norm"),
    },
    default_baseline="native",
    origin="rmsnorm",
)
