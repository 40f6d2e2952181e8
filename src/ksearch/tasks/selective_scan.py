"""Mamba-1 selective scan (mamba_ssm's selective_scan_ref with delta_softplus=True, D and z present)."""

from __future__ import annotations

from typing import Any

from ksearch.tasks.base import Baseline, Task, TensorSpec, Workload, read_starter


def softplus(x: Any) -> Any:
    import mlx.core as mx

    # Same branch as mamba_ssm's CUDA kernel: identity above 20, log1p(exp(x)) below.
    return mx.where(x > 20.0, x, mx.log1p(mx.exp(mx.minimum(x, 20.0))))


def reference(inputs: dict[str, Any]) -> tuple[Any, Any]:
    import mlx.core as mx

    f32 = mx.float32
    u, delta, z = (inputs[k].astype(f32) for k in ("u", "delta", "z"))
    A, B, C = (inputs[k].astype(f32) for k in ("A", "B", "C"))
    D, bias = inputs["D"].astype(f32), inputs["delta_bias"].astype(f32)
    batch, dim, length = u.shape
    dt = softplus(delta + bias[None, :, None])  # (b, d, l)
    x = mx.zeros((batch, dim, A.shape[1]), dtype=f32)
    ys = []
    # A plain sequential recurrence: slow but obviously right, and it runs in the trusted worker only.
    for t in range(length):
        dt_t = dt[:, :, t][..., None]  # (b, d, 1)
        x = mx.exp(dt_t * A[None]) * x + dt_t * B[:, None, :, t] * u[:, :, t][..., None]
        ys.append(mx.sum(x * C[:, None, :, t], axis=-1))
        if t % 64 == 63:
            mx.eval(x, ys)
    y = mx.stack(ys, axis=-1) + D[None, :, None] * u
    y = y * (z * mx.sigmoid(z))
    return y, x


def _bytes(w: Workload) -> float:
    b, d, n, length = (w.axes[k] for k in ("batch", "dim", "N", "L"))
    size = 4 if w.dtype == "float32" else 2
    return size * (4 * b * d * length + 2 * b * n * length) + 4 * (d * n + 2 * d + b * d * n)


def _flops(w: Workload) -> float:
    b, d, n, length = (w.axes[k] for k in ("batch", "dim", "N", "L"))
    return 9.0 * b * d * n * length


def _w(name: str, b: int, d: int, n: int, length: int, dtype: str, split: str = "search", tier: str = "cpu") -> Workload:
    return Workload(name, {"batch": b, "dim": d, "N": n, "L": length}, dtype, split=split, tier=tier)  # type: ignore[arg-type]


WORKLOADS = [
    _w("cpu_b1_d64_l128_f32", 1, 64, 16, 128, "float32"),
    _w("cpu_b2_d32_l256_f32", 2, 32, 16, 256, "float32"),
    _w("cpu_b1_d64_l128_f16", 1, 64, 16, 128, "float16"),
    _w("cpu_b1_d48_l200_f32", 1, 48, 16, 200, "float32", split="holdout"),
    _w("gpu_370m_l512_f16", 1, 2048, 16, 512, "float16", tier="gpu"),
    _w("gpu_370m_l2048_f16", 1, 2048, 16, 2048, "float16", tier="gpu"),
    _w("gpu_370m_l1024_f32", 1, 2048, 16, 1024, "float32", tier="gpu"),
    _w("gpu_370m_l1024_f16", 1, 2048, 16, 1024, "float16", split="holdout", tier="gpu"),
    _w("gpu_370m_l4096_f16", 1, 2048, 16, 4096, "float16", split="holdout", tier="gpu"),
]

TASK = Task(
    name="selective_scan",
    kind="scan",
    description=(
        "Mamba-1 selective scan. run(u, delta, A, B, C, D, z, delta_bias) -> (y, last_state). "
        "u, delta, z: (batch, dim, L) workload dtype; A: (dim, N) float32, negative; B, C: (batch, N, L) workload "
        "dtype; D, delta_bias: (dim,) float32. In float32: dt = softplus(delta + delta_bias) (identity above 20); "
        "x_l = exp(dt_l * A) * x_{l-1} + dt_l * B_l * u_l with x_{-1} = 0 (state (batch, dim, N)); "
        "y_l = sum_n x_l[n] * C_l[n] + D * u_l; y *= z * sigmoid(z); y in u's dtype; last_state = x_{L-1} in float32. "
        "The recurrence is an associative scan over pairs (a, b) with (a2, b2) o (a1, b1) = (a2*a1, a2*b1 + b2), "
        "identity (1, 0)."
    ),
    inputs=[
        TensorSpec("u", ("batch", "dim", "L")),
        TensorSpec("delta", ("batch", "dim", "L"), scale=0.5),
        TensorSpec("A", ("dim", "N"), dtype="float32", init="negative", scale=4.0),
        TensorSpec("B", ("batch", "N", "L")),
        TensorSpec("C", ("batch", "N", "L")),
        TensorSpec("D", ("dim",), dtype="float32"),
        TensorSpec("z", ("batch", "dim", "L")),
        TensorSpec("delta_bias", ("dim",), dtype="float32", scale=0.5),
    ],
    outputs=[TensorSpec("y", ("batch", "dim", "L")), TensorSpec("last_state", ("batch", "dim", "N"), dtype="float32")],
    workloads=WORKLOADS,
    reference=reference,
    flops=_flops,
    bytes_moved=_bytes,
    forbidden=(),
    baselines={
        "naive": Baseline(
            "naive",
            {"cpu": read_starter("selective_scan_cpu.py"), "cuda": read_starter("selective_scan_cuda.py"),
             "metal": read_starter("selective_scan_metal.py")},
            "the starting candidate: a per-token MLX loop on CPU, one thread per (batch, channel) on GPUs",
        ),
        "community": Baseline(
            "community",
            {"any": read_starter("selective_scan_community.py")},
            "a per-token loop in the style of mlx-lm's Mamba (ssm_step per token, in the workload dtype)",
        ),
    },
    default_baseline="naive",
    origin="selective_scan",
)
