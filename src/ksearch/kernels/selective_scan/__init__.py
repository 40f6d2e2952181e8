"""Mamba-1 selective scan and decode step, dispatched by backend.

- MLX-CUDA (a GPU default device with mx.cuda available): the kernels of cuda.py.
- MLX-Metal: the kernels of metal.py, only when asked (KSEARCH_METAL_KERNELS=1 or use_metal=True):
  they are not yet measured on Apple hardware (they run on the Metal emulation, mlx-metal-emu); otherwise the ops
  path.
- Anything else (mlx-cpu): MLX ops (ops.py).
KSEARCH_SCAN_BACKEND=ops|cuda|metal forces a path (tests compare paths this way).

Public contracts (the `selective_scan` and `selective_state_update` tasks):
  selective_scan(u, delta, A, B, C, D, z, delta_bias) -> (y, last_state)
      u, delta, z (batch, dim, L); A (dim, N); B, C (batch, N, L); D, delta_bias (dim,); y like u, last_state f32.
  selective_state_update(x, z, conv_state, conv_weight, conv_bias, x_proj_weight, dt_proj_weight, dt_bias, A, D,
                         ssm_state) -> (y, new_conv_state, new_ssm_state)   (see tasks/selective_state_update.py)
The big tensors may be strided views; parameters (A, D, delta_bias, conv / x_proj / dt_proj weights) must be
row-contiguous, as parameters are: the kernels index them directly (a per-call mx.contiguous would be a graph node).
The model-facing helpers take the (batch, L, dim) layout that in_proj produces, as strided views.
"""

from __future__ import annotations

import os
from types import ModuleType
from typing import Any

import mlx.core as mx

from ksearch.config import env_switch
from ksearch.kernels import arguments, device
from ksearch.kernels.selective_scan import ops as ops_path

BACKENDS = ("ops", "cuda", "metal")

MAX_KERNEL_STATE = 16  # the kernels keep N states in registers / 32 KB of shared memory
# The decode step keeps one float per channel in static shared memory (48 KB on CUDA, 32 KB on Metal).
MAX_KERNEL_DIM = {"cuda": 8192, "metal": 4096}


def kernel_backend(use_metal: bool | None = None) -> str:
    """"cuda", "metal" or "ops": which implementation runs on the current default device."""
    forced = os.environ.get("KSEARCH_SCAN_BACKEND", "").strip().lower()
    if forced in BACKENDS:
        return forced
    if forced:
        raise ValueError(f"KSEARCH_SCAN_BACKEND={forced!r}: name one of {', '.join(BACKENDS)}, or leave it unset")
    emulated = device.metal_emulated()
    if mx.default_device() != mx.gpu and not emulated:
        return "ops"
    if not emulated and getattr(mx, "cuda", None) is not None and mx.cuda.is_available():
        return "cuda"
    if use_metal is None:
        use_metal = device.metal_enabled()
    if use_metal and (emulated or (getattr(mx, "metal", None) is not None and mx.metal.is_available())):
        return "metal"
    return "ops"


def _module(backend: str) -> ModuleType:
    if backend == "cuda":
        from ksearch.kernels.selective_scan import cuda

        return cuda
    if backend == "metal":
        from ksearch.kernels.selective_scan import metal

        return metal
    return ops_path


def _require_backend(backend: str | None) -> None:
    if backend is not None and backend not in BACKENDS:
        raise ValueError(f"backend={backend!r}: name one of {', '.join(BACKENDS)}, or None (the device's)")


def _pick(n_state: int, backend: str | None, use_metal: bool | None) -> ModuleType:
    _require_backend(backend)
    name = backend or kernel_backend(use_metal)
    if name != "ops" and n_state > MAX_KERNEL_STATE:
        name = "ops"
    return _module(name)


def scan_views(u: mx.array, delta: mx.array, A: mx.array, B: mx.array, C: mx.array, D: mx.array, z: mx.array,
               delta_bias: mx.array, h0: mx.array | None = None, y_bld: bool = False, backend: str | None = None,
               use_metal: bool | None = None) -> tuple[mx.array, mx.array]:
    """The scan on (batch, dim, L) / (batch, N, L) views of any strides; y in (batch, L, dim) with y_bld."""
    mod = _pick(A.shape[1], backend, use_metal)
    if mod is not ops_path:
        dtype = u.dtype
        delta, z, B, C = (a.astype(dtype) for a in (delta, z, B, C))
    return mod.scan(u, delta, A, B, C, D, z, delta_bias, h0=h0, y_bld=y_bld)  # type: ignore[no-any-return]


def selective_scan(u: mx.array, delta: mx.array, A: mx.array, B: mx.array, C: mx.array, D: mx.array, z: mx.array,
                   delta_bias: mx.array, *, h0: mx.array | None = None, backend: str | None = None,
                   use_metal: bool | None = None) -> tuple[mx.array, mx.array]:
    """Mamba-1 selective scan (softplus on delta + delta_bias, D skip, z gate); h0 an optional initial state.

    u, delta, z (batch, dim, L); A (dim, N); B, C (batch, N, L); D, delta_bias (dim,); h0 (batch, dim, N): mx.arrays
    of float16, bfloat16 or float32, the sizes of each name equal (no broadcasting); anything else is a TypeError or
    ValueError naming the argument, before anything runs. Returns y (u's shape and dtype) and the last state (batch,
    dim, N) float32; L = 0 gives an empty y and h0 (zeros without it)."""
    _require_backend(backend)
    arrays = (u, delta, A, B, C, D, z, delta_bias, h0)
    if not all(isinstance(a, mx.array) for a in arrays[:8]) or not (h0 is None or isinstance(h0, mx.array)):
        arguments.require_arrays("selective_scan", {n: a for n, a in zip(arguments.SCAN_NAMES, arrays, strict=True)
                                                    if n != "h0" or a is not None})
    if arguments.scan_shapes(tuple(None if a is None else a.shape for a in arrays),
                             tuple(a.dtype for a in arrays if a is not None)):
        if u.shape[2] == 0:
            state = mx.zeros((u.shape[0], u.shape[1], A.shape[1]), mx.float32) if h0 is None else h0
            return mx.zeros(u.shape, u.dtype), state.astype(mx.float32)
        backend = "ops"  # no kernel launches on an empty grid
    c = mx.contiguous  # the kernels index parameters directly: a broadcast A (stride 0) would be misread
    return scan_views(u, delta, c(A), B, C, c(D), z, c(delta_bias), h0=h0, backend=backend, use_metal=use_metal)


def causal_conv_silu(x: mx.array, weight: mx.array, bias: mx.array | None, state: mx.array | None,
                     backend: str | None = None, use_metal: bool | None = None) -> tuple[mx.array, mx.array]:
    """silu(depthwise causal conv(x) + bias) on (batch, L, dim) with the previous K-1 inputs in `state`."""
    mod = _pick(0, backend, use_metal)
    if mod is not ops_path and x.shape[1] < weight.shape[1] - 1:
        mod = ops_path  # the kernel writes the new state from the last K-1 inputs of this call
    return mod.conv_silu(x, weight, bias, state)  # type: ignore[no-any-return]


def selective_state_update(x: mx.array, z: mx.array, conv_state: mx.array, conv_weight: mx.array,
                           conv_bias: mx.array | None, x_proj_weight: mx.array, dt_proj_weight: mx.array,
                           dt_bias: mx.array, A: mx.array, D: mx.array, ssm_state: mx.array, *,
                           backend: str | None = None,
                           use_metal: bool | None = None) -> tuple[mx.array, mx.array, mx.array]:
    """One decode token of a Mamba-1 mixer after in_proj (one kernel launch on CUDA).

    x, z (batch, dim); conv_state (batch, K-1, dim); conv_weight (dim, K); conv_bias (dim,) or None; x_proj_weight
    (R + 2N, dim); dt_proj_weight (dim, R); dt_bias, D (dim,); A (dim, N); ssm_state (batch, dim, N): mx.arrays of
    float16, bfloat16 or float32, the sizes of each name equal (no broadcasting); anything else is a TypeError or
    ValueError naming the argument, before anything runs. Returns y (batch, dim) in x's dtype, the new conv state and
    the new SSM state (float32)."""
    _require_backend(backend)
    arrays = (x, z, conv_state, conv_weight, conv_bias, x_proj_weight, dt_proj_weight, dt_bias, A, D, ssm_state)
    if not all(isinstance(a, mx.array) for a in arrays if a is not conv_bias) or not (
            conv_bias is None or isinstance(conv_bias, mx.array)):
        arguments.require_arrays("selective_state_update", {
            n: a for n, a in zip(arguments.UPDATE_NAMES, arrays, strict=True) if n != "conv_bias" or a is not None})
    if arguments.state_update_shapes(tuple(None if a is None else a.shape for a in arrays),
                                     tuple(a.dtype for a in arrays if a is not None)):
        backend = "ops"  # no kernel launches on an empty grid
    return _state_update(x, z, conv_state, conv_weight, conv_bias, x_proj_weight, dt_proj_weight, dt_bias, A, D,
                         ssm_state, backend, use_metal)


def _state_update(x: mx.array, z: mx.array, conv_state: mx.array, conv_weight: mx.array, conv_bias: mx.array | None,
                  x_proj_weight: mx.array, dt_proj_weight: mx.array, dt_bias: mx.array, A: mx.array, D: mx.array,
                  ssm_state: mx.array, backend: str | None = None,
                  use_metal: bool | None = None) -> tuple[mx.array, mx.array, mx.array]:
    """`selective_state_update` without its checks, for the model's own calls (its arrays made by derive_params)."""
    mod = _pick(A.shape[1], backend, use_metal)
    if x.shape[1] > MAX_KERNEL_DIM.get(mod.__name__.rsplit(".", 1)[-1], 0):
        mod = ops_path
    c = mx.contiguous  # parameters are indexed directly by the kernels
    return mod.mixer_step(  # type: ignore[no-any-return]
        x, z, conv_state, c(conv_weight), c(conv_bias) if conv_bias is not None else None, c(x_proj_weight),
        c(dt_proj_weight), c(dt_bias), c(A), c(D), ssm_state)


# -- model-facing: one Mamba-1 mixer after in_proj --------------------------------------------------------------
# Default: the kernels read strided views of in_proj's / x_proj's outputs (slices and transposes, no copies), the
# layout whose outputs were checked against mlx-lm on the H200 (benchmarks/results/mamba-370m-*.json, summary
# max_abs_diff_*). KSEARCH_MAMBA_FUSED=1 (or fused=True) takes the path with fewer graph nodes: the outputs go to the
# kernels whole, with offsets instead of slices, and the dt slice is folded into the dt_proj matmul (dt_ext has zero
# rows for the B and C columns). It measured faster decode on the H200 (457 vs 319 tok/s compiled) but its outputs
# have not been compared on the GPU since the fix of the real bug behind its NaNs (a broadcast A_log, now made
# contiguous in derive_params), so it stays opt-in until `pytest -m gpu tests/test_gpu_mamba.py` passes with it.


def fused_layout(fused: bool | None = None) -> bool:
    """fused as passed, else KSEARCH_MAMBA_FUSED read strictly (a value that is not on or off is a ConfigError)."""
    if fused is None:
        return env_switch("KSEARCH_MAMBA_FUSED", False)
    return fused


class MixerParams:
    """Kernel-ready parameters of one mixer, derived once (not an mx.array attribute: never an nn parameter)."""

    def __init__(self, key: tuple[int, ...], values: dict[str, Any]) -> None:
        self.key = key
        self.values = values


def derive_params(A_log: mx.array, D: mx.array, conv_weight: mx.array, conv_bias: mx.array | None,
                  x_proj_weight: mx.array, dt_proj_weight: mx.array, dt_proj_bias: mx.array,
                  dtype: mx.Dtype, cached: MixerParams | None = None) -> MixerParams:
    """conv_weight in PyTorch (dim, 1, K) or MLX (dim, K, 1) layout. Re-derived only when a parameter changed."""
    src = (A_log, D, conv_weight, conv_bias, x_proj_weight, dt_proj_weight, dt_proj_bias)
    key = tuple(id(a) for a in src)
    if cached is not None and cached.key == key:
        return cached
    dim = conv_weight.shape[0]
    k = conv_weight.shape[1] * conv_weight.shape[2]
    r = dt_proj_weight.shape[1]
    n2 = x_proj_weight.shape[0] - r
    dt_w = dt_proj_weight.astype(dtype)
    # Every value row-contiguous (mx.contiguous is free on an array that already is): the kernels index parameters
    # directly, and a parameter built with broadcast_to (A_log of a freshly constructed model) has stride 0 over
    # channels. That was the H200's wrong-output bug of the random-weight model (benchmarks/findings.md).
    c = mx.contiguous
    values: dict[str, Any] = {
        "A": c(-mx.exp(A_log.astype(mx.float32))),
        "D": c(D.astype(mx.float32)),
        "dt_bias": c(dt_proj_bias.astype(mx.float32)),
        "conv_w": c(conv_weight.reshape(dim, k).astype(dtype)),
        "conv_b": c(conv_bias.astype(dtype)) if conv_bias is not None else None,
        "x_proj_w": c(x_proj_weight.astype(dtype)),
        "x_proj_wT": x_proj_weight.astype(dtype).T,
        "dt_proj_w": c(dt_w),
        "dt_ext": mx.concatenate([dt_w.T, mx.zeros((n2, dim), dtype=dtype)], axis=0),
    }
    mx.eval([v for v in values.values() if v is not None])
    return MixerParams(key, values)


def mixer_prefill(xz: mx.array, p: dict[str, Any], conv_state: mx.array | None,
                  ssm_state: mx.array | None, backend: str | None = None,
                  fused: bool | None = None) -> tuple[mx.array, mx.array, mx.array]:
    """xz: in_proj's output (batch, L, 2 * d_inner). Returns the gated scan output y (batch, L, d_inner) (before
    out_proj), the conv state (batch, K-1, d_inner) and the SSM state (batch, d_inner, N) float32."""
    A, conv_w = p["A"], p["conv_w"]
    assert A is not None and conv_w is not None
    dim, n = A.shape
    r = p["dt_proj_w"].shape[1]
    name = backend or kernel_backend()
    if name == "cuda" and fused_layout(fused) and n <= MAX_KERNEL_STATE and xz.shape[1] >= conv_w.shape[1] - 1:
        from ksearch.kernels.selective_scan import cuda as cu

        xc, conv_state = cu.conv_silu(xz, conv_w, p["conv_b"], conv_state)
        dbl = xc @ p["x_proj_wT"]
        dt = dbl @ p["dt_ext"]
        # B and C as two distinct arrays (no array passed twice: placeholders.py).
        y, ssm_state = cu.scan(xc, dt, A, dbl, dbl[..., r + n:], p["D"], xz, p["dt_bias"], h0=ssm_state,
                               y_bld=True, bld=True, z_off=dim, b_off=r, c_off=0)
        return y, conv_state, ssm_state
    xs, z = xz[..., :dim], xz[..., dim:]
    xc, conv_state = causal_conv_silu(xs, conv_w, p["conv_b"], conv_state, backend=backend)
    dbl = xc @ p["x_proj_wT"]
    dt = dbl[..., :r] @ p["dt_proj_w"].T
    t = (0, 2, 1)
    y, ssm_state = scan_views(xc.transpose(t), dt.transpose(t), A, dbl[..., r:r + n].transpose(t),
                              dbl[..., r + n:].transpose(t), p["D"], z.transpose(t), p["dt_bias"],
                              h0=ssm_state, y_bld=True, backend=backend)
    return y, conv_state, ssm_state


def mixer_decode(xz: mx.array, p: dict[str, Any], conv_state: mx.array, ssm_state: mx.array,
                 backend: str | None = None, fused: bool | None = None) -> tuple[mx.array, mx.array, mx.array]:
    """xz: in_proj's output for one token (batch, 1, 2 * d_inner). Returns y (batch, 1, d_inner) and the states."""
    A = p["A"]
    assert A is not None
    dim = A.shape[0]
    batch = xz.shape[0]
    name = backend or kernel_backend()
    if (name == "cuda" and fused_layout(fused) and A.shape[1] <= MAX_KERNEL_STATE
            and dim <= MAX_KERNEL_DIM["cuda"]):
        from ksearch.kernels.selective_scan import cuda as cu

        return cu.mixer_step(xz, xz[..., dim:], conv_state, p["conv_w"], p["conv_b"], p["x_proj_w"],
                             p["dt_proj_w"], p["dt_bias"], A, p["D"], ssm_state, z_off=0,
                             y_shape=(batch, 1, dim))
    y, conv_state, ssm_state = _state_update(
        xz[:, 0, :dim], xz[:, 0, dim:], conv_state, p["conv_w"], p["conv_b"], p["x_proj_w"],
        p["dt_proj_w"], p["dt_bias"], A, p["D"], ssm_state, backend=backend)
    return y[:, None], conv_state, ssm_state
