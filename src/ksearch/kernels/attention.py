"""Attention kernels as plain functions: `attention` (prefill) and `decode` (one step against a KV cache).

Each picks the best kernel configuration for the backend and shape and falls back to MLX's own
`mx.fast.scaled_dot_product_attention` wherever no kernel of ours fits (CPU, fp32, odd head dims or lengths).
Metal kernels are opt-in (`KSEARCH_METAL_KERNELS=1` or `use_metal=True`) until they are measured on Apple hardware.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from functools import cache
from typing import Any

from ksearch.kernels.attention_cuda import PrefillConfig
from ksearch.kernels.attention_wgmma import WgmmaConfig
from ksearch.kernels.attention_wgmma_ws import WsConfig
from ksearch.kernels.decode_cluster import ClusterConfig
from ksearch.kernels.decode_cuda import DecodeConfig


def _backend() -> str:
    """'cuda', 'metal' or 'cpu': where the default stream runs."""
    import mlx.core as mx

    if mx.default_device().type != mx.gpu:
        return "cpu"
    if getattr(mx, "cuda", None) is not None and mx.cuda.is_available():
        return "cuda"
    if mx.metal.is_available():
        return "metal"
    return "cpu"


def metal_enabled(use_metal: bool | None = None) -> bool:
    if use_metal is not None:
        return use_metal
    return os.environ.get("KSEARCH_METAL_KERNELS", "") not in ("", "0", "false", "False")


@cache
def hopper() -> bool:
    """Whether the CUDA device runs wgmma (compute capability 9.x: H100, H200, H800, H20, GH200)."""
    import mlx.core as mx

    try:
        info = mx.device_info()
    except Exception:  # noqa: BLE001 - an MLX without device_info: assume not, the mma.sync kernel runs anywhere
        return False
    return int(info.get("compute_capability_major", 0)) == 9 or str(info.get("architecture", "")).startswith("sm_90")


def wgmma_enabled() -> bool:
    """KSEARCH_WGMMA: unset or "auto" -> on Hopper only; "0" off; "1" on (for a device `hopper()` misreads)."""
    env = os.environ.get("KSEARCH_WGMMA", "auto").strip().lower()
    if env in ("0", "false", "off", "no"):
        return False
    if env in ("1", "true", "on", "yes"):
        return True
    return hopper()


def wgmma_config(q: Any, k: Any, causal: bool) -> WgmmaConfig | WsConfig:
    """Three warpgroups (192 query rows) share each 64-key tile: a third less K/V traffic from L2 than two, which the
    H200 measured as the best of the wgmma configurations at nearly every shape, both head dims
    (benchmarks/results/attention-wgmma-check-mlx-cuda-nvidia-h200.json). KSEARCH_WGMMA_CONFIG names another
    (attention_wgmma_ws.parse_config: e.g. wg3_n64, ws3_n64_s3_p4)."""
    name = os.environ.get("KSEARCH_WGMMA_CONFIG", "").strip()
    if name:
        from ksearch.kernels.attention_wgmma_ws import parse_config

        return parse_config(name)
    # A producer warpgroup (setmaxnreg: 24 registers for it, 160 for each of the three consumer warpgroups) loads K / V
    # with one bulk copy a tile from tile images of them (attention_wgmma_ws.tile_images, one extra pass over K / V):
    # on the H200 side by side 551 vs 410 TFLOP/s (cp.async producer) at L=8192, D=128 without a mask, 394 vs 288 at
    # D=64 (benchmarks/results/attention-wgmma-check-*.json; the grid in attention-prefill-*.json;
    # docs/kernels-attention.md).
    return WsConfig(wg=3, bn=64, stages=4, pwarps=4, bulk=True)


def prefill_config(q: Any, k: Any, causal: bool) -> PrefillConfig:
    """The mma.sync configuration measured best on the H200 (docs/kernels-attention.md); used where wgmma is not."""
    # 8 warps (BM=128) share each K/V tile between twice the rows of BM=64: half the tile loads per FLOP. Measured
    # as the default on the H200 for both head dims (benchmarks/findings.md, the mma.sync row).
    return PrefillConfig(bm=128, bn=64, db=True)


def decode_config(q: Any, k_cache: Any, length: int) -> DecodeConfig:
    """The sweep's best on the H200 over B 1/8/16 x 4k/16k/32k (benchmarks/results/decode-config-sweep-*.json)."""
    return DecodeConfig()


def native_attention(q: Any, k: Any, v: Any, causal: bool = False) -> Any:
    import mlx.core as mx

    return mx.fast.scaled_dot_product_attention(q, k, v, scale=1.0 / math.sqrt(q.shape[-1]),
                                                mask="causal" if causal else None)


def native_decode(q: Any, k_cache: Any, v_cache: Any, length: int) -> Any:
    import mlx.core as mx

    return mx.fast.scaled_dot_product_attention(q, k_cache[:, :, :length], v_cache[:, :, :length],
                                                scale=1.0 / math.sqrt(q.shape[-1]))


def prefill_plan(q: Any, k: Any, v: Any, causal: bool = False, *, use_metal: bool | None = None,
                 config: PrefillConfig | WgmmaConfig | WsConfig | None = None) -> tuple[str, Callable[[], Any]]:
    """(name of the kernel `attention` runs for these inputs, a call that runs it): the dispatch, inspectable without
    running anything (`ksearch bench attention` records the name per shape). Names: a wgmma configuration as
    KSEARCH_WGMMA_CONFIG spells it (e.g. ws3_n64_s4_p4_bulk), mma_sync_mBM_nBN[_db], metal_simdgroup, metal_rows,
    native."""
    where = _backend()
    if where == "cuda":
        from ksearch.kernels import attention_cuda, attention_wgmma, attention_wgmma_ws

        auto = config is None and wgmma_enabled()
        chosen = wgmma_config(q, k, causal) if auto else config
        if isinstance(chosen, WsConfig) and attention_wgmma_ws.supports(q, k, v, causal, chosen):
            ws = chosen
            return (attention_wgmma_ws.config_name(ws),
                    lambda: attention_wgmma_ws.attention_wgmma_ws(q, k, v, causal, ws))
        if isinstance(chosen, WgmmaConfig) and attention_wgmma.supports(q, k, v, causal, chosen):
            wg = chosen
            return attention_wgmma_ws.config_name(wg), lambda: attention_wgmma.attention_wgmma(q, k, v, causal, wg)
        if not isinstance(config, (WsConfig, WgmmaConfig)):  # asked for outright: no other kernel stands in for it
            cfg = config if isinstance(config, PrefillConfig) else prefill_config(q, k, causal)
            if attention_cuda.supports(q, k, v, causal, cfg):
                return (f"mma_sync_m{cfg.bm}_n{cfg.bn}{'_db' if cfg.db else ''}",
                        lambda: attention_cuda.attention_cuda(q, k, v, causal, cfg))
    elif where == "metal" and metal_enabled(use_metal):
        from ksearch.kernels import attention_metal, attention_metal_mma

        # float16: the simdgroup_matrix kernel; other dtypes: the row kernel. Neither has run on Apple hardware.
        if attention_metal_mma.supports(q, k, v, causal):
            return "metal_simdgroup", lambda: attention_metal_mma.attention_metal_mma(q, k, v, causal)
        if attention_metal.supports_prefill(q, k, v, causal):
            return "metal_rows", lambda: attention_metal.attention_metal(q, k, v, causal)
    return "native", lambda: native_attention(q, k, v, causal)


def attention(q: Any, k: Any, v: Any, causal: bool = False, *, use_metal: bool | None = None,
              config: PrefillConfig | WgmmaConfig | WsConfig | None = None) -> Any:
    """softmax(q k^T / sqrt(D) + causal mask) v; q (B, Hq, L, D), k/v (B, Hkv, S, D), mask aligned lower right.

    On CUDA: the wgmma kernel on Hopper (see `wgmma_enabled`), else the mma.sync one; `config` picks a kernel and
    configuration outright (it still falls back to native where that kernel does not fit the shape). `prefill_plan`
    says which kernel that is."""
    return prefill_plan(q, k, v, causal, use_metal=use_metal, config=config)[1]()


def decode_plan(q: Any, k_cache: Any, v_cache: Any, length: int, *, use_metal: bool | None = None,
                config: DecodeConfig | ClusterConfig | None = None) -> tuple[str, Callable[[], Any]]:
    """(name of the kernel `decode` runs: split_k, cluster, metal_split_k or native, a call that runs it).

    A ClusterConfig asks for the one-launch cluster kernel (decode_cluster.py): Hopper only, and only with MLX's CUDA
    graphs off (ValueError otherwise, before anything runs: under MLX 0.32's graphs it would stop later custom kernels
    from running); where it does not fit, native."""
    length = int(length)
    where = _backend()
    if isinstance(config, ClusterConfig):
        from ksearch.kernels import decode_cluster

        cl = config
        if where == "cuda" and hopper() and decode_cluster.supports(q, k_cache, length, cl) and \
                v_cache.shape == k_cache.shape:
            if not decode_cluster.graphs_off():
                raise ValueError(decode_cluster.GRAPHS_ERROR)
            return "cluster", lambda: decode_cluster.decode_cluster(q, k_cache, v_cache, length, cl)
        return "native", lambda: native_decode(q, k_cache, v_cache, length)
    if where == "cuda":
        from ksearch.kernels import decode_cuda

        if decode_cuda.supports(q, k_cache, length) and v_cache.shape == k_cache.shape:
            cfg = config or decode_config(q, k_cache, length)
            return "split_k", lambda: decode_cuda.decode_cuda(q, k_cache, v_cache, length, cfg)
    elif where == "metal" and metal_enabled(use_metal):
        from ksearch.kernels import attention_metal

        if attention_metal.supports_decode(q, k_cache, length):
            return "metal_split_k", lambda: attention_metal.decode_metal(q, k_cache, v_cache, length)
    return "native", lambda: native_decode(q, k_cache, v_cache, length)


def decode(q: Any, k_cache: Any, v_cache: Any, length: int, *, use_metal: bool | None = None,
           config: DecodeConfig | ClusterConfig | None = None) -> Any:
    """One decode step: q (B, Hq, 1, D) against positions [0, length) of caches (B, Hkv, capacity, D)."""
    return decode_plan(q, k_cache, v_cache, length, use_metal=use_metal, config=config)[1]()
