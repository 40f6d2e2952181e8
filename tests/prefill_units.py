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


def compiled_spills(prefix: str, cases: tuple[tuple[str, int, bool], ...]) -> dict[str, int]:
    """Each (configuration name, D, causal) compiled for sm_90a in one unit, checked to compile without serialised
    wgmma; {unit name (`prefix` and its index): spill-store bytes}."""
    from ksearch.backends.nvcc import compile_check
    from ksearch.kernels import tensor_map
    from ksearch.kernels.cuda_headers import WGMMA_HEADER
    from ksearch.knowledge.resources import parse_ptxas

    units = [tensor_copy_unit(f"{prefix}{i}_{d}", WS.parse_config(name), d, causal)
             for i, (name, d, causal) in enumerate(cases)]
    ok, log = compile_check([WGMMA_HEADER, tensor_map.TMA_HEADER, *units])
    assert ok, log[-3000:]
    assert "C751" not in log, "wgmma serialised"  # C7510-C7515: every wgmma of the kernel serialised
    spills = {k.kernel[:len(prefix) + 1]: k.spill_store_bytes for k in parse_ptxas(log)}
    assert len(spills) == len(cases), log[-3000:]
    return spills
