"""Mamba-1 fused decode step: one token through a mixer, after in_proj (what mlx-lm's MambaBlock does per token).

run(x, z, conv_state, conv_weight, conv_bias, x_proj_weight, dt_proj_weight, dt_bias, A, D, ssm_state)
    -> (y, new_conv_state, new_ssm_state)

Inputs (workload dtype unless marked float32):
  x, z             (batch, dim)        the two halves of in_proj's output for this token
  conv_state       (batch, K-1, dim)   the previous K-1 values of x (mlx-lm's conv cache layout)
  conv_weight      (dim, K)            depthwise causal conv taps, oldest first; conv_bias (dim,)
  x_proj_weight    (R + 2N, dim)       rows [0, R) give dt_in, [R, R+N) give B, [R+N, R+2N) give C
  dt_proj_weight   (dim, R);  dt_bias (dim,) float32
  A (dim, N) float32 (negative);  D (dim,) float32;  ssm_state (batch, dim, N) float32
Math, in float32:
  window = concat(conv_state, x) over time (batch, K, dim); xc = silu(sum_k window[k] * conv_weight[:, k] + conv_bias)
  dbl = xc @ x_proj_weight.T; dt = softplus(dbl[:, :R] @ dt_proj_weight.T + dt_bias) (identity above 20)
  h = exp(dt * A) * ssm_state + (dt * xc) * B;  y = sum_n h * C + D * xc;  y *= silu(z)
Outputs: y (batch, dim) workload dtype; new_conv_state = window[:, 1:] (batch, K-1, dim) workload dtype;
  new_ssm_state = h (batch, dim, N) float32.
"""

from __future__ import annotations

from typing import Any

from ksearch.tasks.base import Baseline, Task, TensorSpec, Workload, read_starter
from ksearch.tasks.selective_scan import softplus

AXES = ("batch", "dim", "N", "R", "K")


def reference(inputs: dict[str, Any]) -> tuple[Any, Any, Any]:
    import mlx.core as mx

    f = {k: v.astype(mx.float32) for k, v in inputs.items()}
    n = f["A"].shape[1]
    r = f["dt_proj_weight"].shape[1]
    window = mx.concatenate([f["conv_state"], f["x"][:, None]], axis=1)
    xc = mx.sum(window * f["conv_weight"].T[None], axis=1) + f["conv_bias"]
    xc = xc * mx.sigmoid(xc)
    dbl = xc @ f["x_proj_weight"].T
    dt = softplus(dbl[:, :r] @ f["dt_proj_weight"].T + f["dt_bias"])
    b, c = dbl[:, r:r + n], dbl[:, r + n:]
    h = mx.exp(dt[..., None] * f["A"]) * f["ssm_state"] + (dt * xc)[..., None] * b[:, None, :]
    y = mx.sum(h * c[:, None, :], axis=-1) + f["D"] * xc
    y = y * f["z"] * mx.sigmoid(f["z"])
    return y, window[:, 1:], h


def _sizes(w: Workload) -> tuple[int, int, int, int, int]:
    return tuple(w.axes[a] for a in AXES)  # type: ignore[return-value]


def _flops(w: Workload) -> float:
    b, d, n, r, k = _sizes(w)
    return float(b * d * (2 * k + 2 * (r + 2 * n) + 2 * r + 8 * n + 12))


def _bytes(w: Workload) -> float:
    b, d, n, r, k = _sizes(w)
    s = 4 if w.dtype == "float32" else 2
    weights = s * d * (k + 1 + (r + 2 * n) + r) + 4 * d * (n + 2)
    per_row = s * d * (3 + 2 * (k - 1)) + 4 * 2 * d * n
    return float(weights + b * per_row)


def _w(name: str, b: int, d: int, dtype: str, split: str = "search", tier: str = "cpu", n: int = 16,
       r: int = 8, k: int = 4) -> Workload:
    axes = {"batch": b, "dim": d, "N": n, "R": r, "K": k, "Km1": k - 1, "P": r + 2 * n}
    return Workload(name, axes, dtype, split=split, tier=tier)  # type: ignore[arg-type]


WORKLOADS = [
    _w("cpu_b1_d64_f32", 1, 64, "float32"),
    _w("cpu_b2_d32_f32", 2, 32, "float32"),
    _w("cpu_b1_d64_f16", 1, 64, "float16"),
    _w("cpu_b3_d48_f32", 3, 48, "float32", split="holdout"),
    # mamba-370m: d_inner 2048, d_state 16, dt_rank 64, d_conv 4.
    _w("gpu_370m_b1_f16", 1, 2048, "float16", tier="gpu", r=64),
    _w("gpu_370m_b8_f16", 8, 2048, "float16", tier="gpu", r=64),
    _w("gpu_370m_b1_f32", 1, 2048, "float32", tier="gpu", r=64),
    _w("gpu_370m_b16_f16", 16, 2048, "float16", split="holdout", tier="gpu", r=64),
    _w("gpu_370m_b16_f32", 16, 2048, "float32", split="holdout", tier="gpu", r=64),
]

TASK = Task(
    name="selective_state_update",
    kind="decode",
    description=(
        "Mamba-1 fused decode step after in_proj. run(x, z, conv_state, conv_weight, conv_bias, x_proj_weight, "
        "dt_proj_weight, dt_bias, A, D, ssm_state) -> (y, new_conv_state, new_ssm_state). x, z: (batch, dim); "
        "conv_state (batch, K-1, dim); conv_weight (dim, K); conv_bias (dim,); x_proj_weight (R+2N, dim); "
        "dt_proj_weight (dim, R) in the workload dtype; dt_bias (dim,), A (dim, N), D (dim,), ssm_state (batch, dim, "
        "N) float32. In float32: window = concat(conv_state, x[:, None]) over axis 1; xc = silu(sum_k window[:, k] * "
        "conv_weight[:, k] + conv_bias); dbl = xc @ x_proj_weight.T; dt = softplus(dbl[:, :R] @ dt_proj_weight.T + "
        "dt_bias) (identity above 20); B = dbl[:, R:R+N], C = dbl[:, R+N:]; h = exp(dt*A) * ssm_state + dt*xc*B; "
        "y = sum_n h*C + D*xc; y *= silu(z). Outputs y (workload dtype), new_conv_state = window[:, 1:] (workload "
        "dtype), new_ssm_state = h (float32). Launch-bound at batch 1: fuse everything into few launches."
    ),
    inputs=[
        TensorSpec("x", ("batch", "dim")),
        TensorSpec("z", ("batch", "dim")),
        TensorSpec("conv_state", ("batch", "Km1", "dim")),
        TensorSpec("conv_weight", ("dim", "K"), scale=0.5),
        TensorSpec("conv_bias", ("dim",), scale=0.5),
        TensorSpec("x_proj_weight", ("P", "dim"), scale=0.05),
        TensorSpec("dt_proj_weight", ("dim", "R"), scale=0.1),
        TensorSpec("dt_bias", ("dim",), dtype="float32", scale=0.5),
        TensorSpec("A", ("dim", "N"), dtype="float32", init="negative", scale=4.0),
        TensorSpec("D", ("dim",), dtype="float32"),
        TensorSpec("ssm_state", ("batch", "dim", "N"), dtype="float32"),
    ],
    outputs=[
        TensorSpec("y", ("batch", "dim")),
        TensorSpec("new_conv_state", ("batch", "Km1", "dim")),
        TensorSpec("new_ssm_state", ("batch", "dim", "N"), dtype="float32"),
    ],
    workloads=WORKLOADS,
    reference=reference,
    flops=_flops,
    bytes_moved=_bytes,
    baselines={
        "naive": Baseline(
            "naive",
            {"cpu": read_starter("selective_state_update_cpu.py"),
             "cuda": read_starter("selective_state_update_cuda.py"),
             "metal": read_starter("selective_state_update_metal.py")},
            "the starting candidate: MLX ops on CPU; on GPUs a conv kernel and an SSM kernel (one thread per "
            "channel) around MLX matmuls for x_proj and dt_proj",
        ),
        "community": Baseline(
            "community",
            {"any": read_starter("selective_state_update_community.py")},
            "mlx-lm's per-token path: concat + depthwise conv1d + silu, x_proj, split, dt_proj + softplus, "
            "ssm_step, gate, all MLX ops in the workload dtype",
        ),
    },
    default_baseline="naive",
    origin="selective_state_update",
)
