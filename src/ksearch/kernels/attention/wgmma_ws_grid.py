"""A persistent wgmma prefill launch's grid, and what a call's shape decides on it: whether the heads a section at a
time (`_hs`) change the order, whether the last round splits along the keys (`_kt`), and the inputs and outputs a
`_kt` launch adds (wgmma_ws_tail). `cfg` is a wgmma_ws.WsConfig throughout."""

from __future__ import annotations

from typing import Any

from ksearch.errors import BackendUnavailable
from ksearch.kernels import device
from ksearch.kernels.attention.cuda_prefill import blocks_for
from ksearch.kernels.attention.wgmma_ws_tail import counter_count, scratch_floats, tail_parts


def kernel_io(cfg: Any) -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
    """(inputs, outputs) of `cfg`'s kernel as (name, dtype name, "T" for the kernel's T), in MLX's order: for
    compile checks and disassembly, which wrap the text as MLX does."""
    ins, outs = [("q", "T"), ("k", "T"), ("v", "T"), ("scale", "float32")], [("o", "T")]
    if cfg.tma:
        ins, outs = [*ins, ("tmap", "uint64")], [*outs, ("maps", "uint64")]
    if cfg.qtma:
        ins = [*ins, ("qmap", "uint64")]
    if cfg.ktail:
        ins, outs = [*ins, ("counts", "uint32")], [*outs, ("part", "float32")]
    return ins, outs


def extra_io(q_shape: tuple[int, ...], k_shape: tuple[int, ...], causal: bool, cfg: Any,
             grid: int) -> tuple[tuple[tuple[str, ...], tuple[str, ...]], int, tuple[Any, ...]]:
    """What `_kt` adds to a tensor-copy launch of `grid` blocks, after the tensor map and the maps' scratch: ((input
    names, output names), how many counters its `counts` input holds (`fresh_counters` makes them a call), (shape,
    dtype) of each output); nothing (0 counters) without it."""
    if not cfg.ktail:
        return ((), ()), 0, ()
    import mlx.core as mx

    items, key_tiles = blocks_for(q_shape, 64 * cfg.wg), -(-k_shape[2] // cfg.bn)
    floats = scratch_floats(items, grid, key_tiles, causal, cfg.wg, q_shape[-1])
    return (("counts",), ("part",)), counter_count(items, grid, cfg.wg), (((floats,), mx.float32),)


def persistent_blocks(items: int, cfg: Any) -> int:
    """The persistent kernel's grid: `cfg.blocks` blocks a multiprocessor, never more blocks than work items."""
    return min(items, device.cuda_sm_count() * cfg.blocks)


def call_grid(q_shape: tuple[int, ...], cfg: Any) -> tuple[int, int] | None:
    """(work items, persistent blocks) of a call, or None without a driver to report the SM count: the shape rules
    below then keep the plain kernel, whose launch says what is missing."""
    items = blocks_for(q_shape, 64 * cfg.wg)
    try:
        return items, persistent_blocks(items, cfg)
    except BackendUnavailable:
        return None


def sections_reorder(q_shape: tuple[int, ...], k_shape: tuple[int, ...], cfg: Any) -> bool:
    """Whether `_hs` changes a persistent kernel's order for a call: more K / V heads than one section takes
    (gridDim.x / 4 of them; wgmma_ws_text.head_sections); with fewer, its order is the plain one item for item."""
    grid = call_grid(q_shape, cfg)
    return grid is not None and q_shape[0] * k_shape[1] > max(1, grid[1] // 4)


def tail_splits(q_shape: tuple[int, ...], k_shape: tuple[int, ...], causal: bool, cfg: Any) -> bool:
    """Whether `_kt` splits a persistent launch's last round for a call (wgmma_ws_tail.tail_parts): without the mask,
    where that round has at most half the grid's items."""
    grid = call_grid(q_shape, cfg)
    return grid is not None and tail_parts(*grid, -(-k_shape[2] // cfg.bn), causal)[2] > 1
