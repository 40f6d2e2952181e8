"""The wgmma prefill kernels' translation units as MLX wraps them (inputs q, k, v, scale and the host's tensor map;
outputs o and the maps scratch; with `_kt` the counters and the parts' scratch too), for compile tests of the
tensor-copy kernels."""

from __future__ import annotations

from typing import Any

from ksearch.backends.nvcc import wrap
from ksearch.kernels.attention import wgmma as W
from ksearch.kernels.attention import wgmma_ws as WS
from ksearch.kernels.attention.wgmma_ws_grid import kernel_io


def tensor_copy_unit(name: str, cfg: Any, d: int, causal: bool, dtype: str = "float16") -> str:
    """`cfg`'s kernel (a WsConfig with tensor copies) as the kernel `custom_kernel_<name>`, at head dimension `d`."""
    return wrap(name, WS.source_text(cfg), W.launch_bounds(cfg.threads(), cfg.blocks), *kernel_io(cfg),
                [("T", dtype), ("D", d), ("WG", cfg.wg), ("BN", cfg.bn), ("CAUSAL", causal), *WS.stage_args(cfg)])
