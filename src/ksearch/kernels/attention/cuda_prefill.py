"""What the CUDA prefill kernels share (the mma.sync kernel of mma_sync.py and both wgmma kernels): where a block's
rows and keys start, the shape check, building a kernel object, and launching it over (batch, query head) rows."""

from __future__ import annotations

import math
from functools import cache
from typing import Any

from ksearch.kernels.kernel_text import cuda_kernel

# Where a block of BM query rows of one (batch, query head) starts, its K / V, and how many BN-key tiles it visits
# (causal: none past its diagonal). Shared by the mma.sync and wgmma prefills.
BLOCK_COORDS = r"""
    const int Hq = q_shape[1], L = q_shape[2], Hkv = k_shape[1], S = k_shape[2];
    const int mt = gridDim.x - 1 - blockIdx.x;  // longest causal tiles first
    const int bhq = blockIdx.y, b = bhq / Hq, h = bhq % Hq, hk = h / (Hq / Hkv);
    const int m0 = mt * BM, shift = S - L;
    const T* qg = q + ((size_t)bhq * L + m0) * D;
    const T* kg = k + (size_t)(b * Hkv + hk) * S * D;
    const T* vg = v + (size_t)(b * Hkv + hk) * S * D;
    const int n_end = CAUSAL ? min(S, m0 + BM + shift) : S;
    const int ntiles = (n_end + BN - 1) / BN;
    const float sl2 = scale[0] * 1.4426950408889634f;
"""

MAX_SMEM = 100_000  # checked to work from mx.fast.cuda_kernel on the H200


def fits(q: Any, k: Any, v: Any, causal: bool, rows: int, keys: int, smem: int) -> bool:
    """What our tensor-core prefill kernels handle: fp16/bf16, D 64 or 128, GQA, L a multiple of the block's `rows`,
    S of its `keys`, causal only with L <= S, and `smem` bytes within MAX_SMEM."""
    return fits_shapes(tuple(q.shape), tuple(k.shape), tuple(v.shape), (q.dtype, k.dtype, v.dtype), causal, rows,
                       keys, smem)


def fits_shapes(q_shape: tuple[int, ...], k_shape: tuple[int, ...], v_shape: tuple[int, ...], dtypes: tuple[Any, ...],
                causal: bool, rows: int, keys: int, smem: int) -> bool:
    """`fits` on the shapes and the (q, k, v) dtypes."""
    import mlx.core as mx

    if dtypes[0] not in (mx.float16, mx.bfloat16) or dtypes[1] != dtypes[0] or dtypes[2] != dtypes[0]:
        return False
    b, hq, length, d = q_shape
    hkv, s = k_shape[1], k_shape[2]
    return (d in (64, 128) and v_shape == k_shape and hq % hkv == 0 and length % rows == 0 and s % keys == 0
            and (not causal or length <= s) and smem <= MAX_SMEM)


@cache
def build_kernel(name: str, source: str, header: str, smem: int, extra_inputs: tuple[str, ...] = (),
                 extra_outputs: tuple[str, ...] = (), constants: tuple[tuple[str, Any], ...] = ()) -> Any:
    """A prefill kernel object (inputs q, k, v, scale and `extra_inputs`; outputs o and `extra_outputs`), built once
    per name, shared-memory size and `constants` (template arguments written into its text, for a caller that keeps
    a kernel per shape and calls it without them: kernel_text.constant_lines)."""
    return cuda_kernel(name=name, input_names=["q", "k", "v", "scale", *extra_inputs],
                       output_names=["o", *extra_outputs], source=source, header=header, constants=constants,
                       shared_memory=smem)


@cache
def softmax_scale(d: int) -> Any:
    """1 / sqrt(d) as a one-element float32 array, made once per head dim: a new array every call is a host-side
    allocation and copy on the path of each small prefill call."""
    import mlx.core as mx

    scale = mx.array([1.0 / math.sqrt(d)], dtype=mx.float32)
    mx.eval(scale)
    return scale


def blocks(q: Any, rows: int) -> int:
    """How many blocks `launch` starts for q: one per `rows` query rows of each (batch, query head)."""
    return blocks_for(tuple(q.shape), rows)


def blocks_for(q_shape: tuple[int, ...], rows: int) -> int:
    b, hq, length, _ = q_shape
    return -(-length // rows) * b * hq


def shape_launch(name: str, source: str, header: str, smem: int, q_shape: tuple[int, ...], dtype: Any, rows: int,
                 nt: int, template: list[tuple[str, Any]]) -> tuple[Any, dict[str, Any]]:
    """(kernel, its launch arguments but the inputs) for one shape, for a caller that keeps the pair per shape and
    configuration: the template arguments written into the kernel's text as constants (MLX would format them into
    every call: kernel_text.constant_lines), so `launch` passes none."""
    kwargs = launch_args(q_shape, dtype, rows, nt, template)
    return build_kernel(name, source, header, smem, constants=tuple(kwargs.pop("template"))), kwargs


def launch(planned: tuple[Any, dict[str, Any]], q: Any, k: Any, v: Any) -> Any:
    """One call of a `shape_launch` pair: one block of nt threads per `rows` query rows (the last block may be
    partial) of each (batch, query head); o has q's shape and dtype."""
    kern, kwargs = planned
    return kern(inputs=[q, k, v, softmax_scale(q.shape[-1])], **kwargs)[0]


def launch_args(q_shape: tuple[int, ...], dtype: Any, rows: int, nt: int, template: list[tuple[str, Any]],
                extra_outputs: tuple[tuple[tuple[int, ...], Any], ...] = (),
                grid_blocks: int | None = None) -> dict[str, Any]:
    """`launch`'s arguments to the kernel object but its inputs, made once per shape by a caller that keeps them;
    `grid_blocks` blocks in one row of the grid instead, for a persistent kernel that walks the work items."""
    b, hq, length, d = q_shape
    grid = (grid_blocks * nt, 1, 1) if grid_blocks else (-(-length // rows) * nt, b * hq, 1)
    return {"template": [("T", dtype), ("D", d), *template], "grid": grid, "threadgroup": (nt, 1, 1),
            "output_shapes": [q_shape, *(shape for shape, _ in extra_outputs)],
            "output_dtypes": [dtype, *(dt for _, dt in extra_outputs)]}
