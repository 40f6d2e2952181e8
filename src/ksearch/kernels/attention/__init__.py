"""Prefill attention as a plain function, `attention`: the dispatch over the kernel families of this package.

It picks the best kernel configuration for the backend and shape and falls back to MLX's own
`mx.fast.scaled_dot_product_attention` wherever no kernel of ours fits (CPU, odd head dims or lengths) or, for
float32, where MLX's was measured faster (`tf32x3_preferred`).
Metal kernels are opt-in (`KSEARCH_METAL_KERNELS=1` or `use_metal=True`) until they are measured on Apple hardware.

The families: mma_sync.py (tensor cores through `mma.sync`, any CUDA GPU), wgmma.py and wgmma_ws.py (Hopper's
`wgmma`; the warp-specialised one is the default there), metal_rows.py (one query row a thread),
metal_simdgroup.py (`simdgroup_matrix`) and metal_fragments.py (the same with the softmax in registers, named
outright through MetalConfig), tf32x3.py (float32 as three TF32 products on `mma.sync`); cuda_prefill.py holds what
the CUDA ones share.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from dataclasses import replace
from functools import lru_cache
from typing import Any, NamedTuple

from ksearch.kernels import arguments, device
from ksearch.kernels.attention import mma_sync, tf32x3, wgmma, wgmma_ws, wgmma_ws_grid
from ksearch.kernels.attention.dispatch_variant import DispatchVariant, parse_dispatch_variant
from ksearch.kernels.attention.mma_sync import PrefillConfig
from ksearch.kernels.attention.wgmma import WgmmaConfig
from ksearch.kernels.attention.wgmma_ws import WsConfig


def wgmma_enabled() -> bool:
    """KSEARCH_WGMMA: unset or "auto" -> on Hopper only; "0" off; "1" on (for a device `device.hopper()` misreads)."""
    setting = wgmma_setting()
    return device.hopper() if setting is None else setting


def wgmma_setting() -> bool | None:
    """KSEARCH_WGMMA as read: False ("0"), True ("1") or None (unset or "auto"); ValueError in one line for any other
    value."""
    env = os.environ.get("KSEARCH_WGMMA", "auto").strip().lower()
    if env in ("0", "false", "off", "no"):
        return False
    if env in ("1", "true", "on", "yes"):
        return True
    if env not in ("auto", ""):
        raise ValueError(f"KSEARCH_WGMMA={env!r}: 0 (the mma.sync kernel), 1 (wgmma) or auto (wgmma on Hopper "
                         "only, as unset)")
    return None


# The Hopper defaults (measured on the H200 side by side, `ksearch bench attention --full --configs ...`,
# benchmarks/results/attention-prefill-configs-*.json; docs/kernels-attention.md). A producer warpgroup (setmaxnreg:
# 24 registers for it, 160 for each consumer warpgroup) loads K / V by tensor copies (TMA) with the 128-byte swizzle
# through a map the host encodes once per shape (kernels/tensor_map.py): no extra pass over K / V. Three consumer
# warpgroups (192 query rows) share each 64-key tile: a third less K/V traffic from L2 than two; the best at D=128
# without the mask in all 6 groups of 4 shapes (as persistent blocks 0-4% slower: they spill). With O stored 16 bytes
# a lane in every kernel each group's choice below still stands (attention-prefill-configs-epilogue-*.json). O is
# rescaled only when a row's maximum grew past 2^8 (`_cr`, FlashAttention-4's rule): 2,055 -> 1,939 cycles a tile at
# D=128 (B 4, L=8192); 3-5% less time than without it at D=128 without the mask, the shapes WIDE takes (two
# processes; attention-prefill-configs-conditional-rescale-*.json).
WIDE = WsConfig(wg=3, bn=64, stages=4, pwarps=4, tma=3, crescale=True)
# Two consumer warpgroups (128 rows) on 128-key tiles: half the softmax steps a key. Persistent blocks (one an SM,
# each walking work items; its producer runs on into the next item while the consumers store O): 3% ahead of the
# same kernel one block an item at D=64 (geomean; ahead in all 12 groups of 4 shapes). With the conditional rescale
# it took 9-13% more time at D=64 and no fewer cycles a tile at D=128 (2,899 -> 2,911): not taken.
# Its items in snake order (`_sn`, the rounds alternating in direction): on the H100 side by side in two processes
# 0.950x / 0.941x of cuDNN at D=64 against 0.943x / 0.927x without
# (attention-prefill-configs-snake-own-tiles-*-h100-*.json).
TALL = WsConfig(wg=2, bn=128, stages=3, pwarps=4, tma=3, persist=True, snake=True)
# WIDE as persistent blocks whose producer keeps 32 registers (no spills; two warpgroups would keep 232, three keep
# 160 either way): at D=128 with the causal mask below L=4096, 0.808x of cuDNN against WIDE's 0.766x and TALL's
# 0.780x in one process (8 shapes; attention-prefill-configs-preg-*.json). With the conditional rescale it takes
# every causal D=128 shape: 0.945x from L=4096 on against TALL's 0.915x / 0.912x in two processes (16 shapes).
# Shorter causal prefills take it too, unmeasured (the benchmark's shortest is L=2048). Each warpgroup multiplies only
# the tiles its own rows need (`_wt`) and the items go in snake order (`_sn`): on the H100 side by side in two
# processes, at D=128 with the mask 0.977x / 0.970x of cuDNN from L=4096 against 0.957x / 0.950x, 0.910x / 0.905x
# below it against 0.846x / 0.864x (attention-prefill-configs-snake-own-tiles-*-h100-*.json).
# With the consumers' index arithmetic on the uniform datapath (`_uw`: no vector-to-uniform moves left in the main
# loop, 582 instructions a pair of tiles against 678) it runs 1,876 cycles a tile against 1,937 (B 4, L=2048, D=128,
# no mask; prefill_item_trace.py), and it takes D=128 without the mask too: on the H200, named beside the dispatch
# of then in two processes, 0.991x / 0.989x of cuDNN from L=4096 against WIDE's 0.956x / 0.957x (the dispatch's
# column), 0.940x / 0.958x below it against 0.893x / 0.903x; with the mask level (0.980x / 0.973x against 0.977x /
# 0.970x from L=4096) (attention-prefill-configs-uniform-index-*.json). As the dispatch's own column later, with WIDE
# named beside it: 0.967x against 0.960x from L=4096, 0.944x against 0.896x below; on an H100 its column and the
# same kernel named measured level (0.945x / 0.942x against 0.939x / 0.930x over the 48 D=128 shapes;
# attention-prefill-configs-dispatch-column-*-h100-*.json, docs/kernels-attention.md).
# P's row sums by one m64n8k16 a tile on fp32 sums of the tile's 16-key blocks (`_r1`, wgmma_ws_row_sums) instead of
# four: on an H100 named beside the dispatch at L=4096, each kernel against its own twin without `_r1` in the same
# rounds (four processes, chained and independent calls), 1.027x-1.044x of its speed without the mask in three of
# them, 1.004x in the fourth, level with it (0.993x-1.009x); with two warpgroups on 128-key tiles (TALL, D=64, chained,
# two processes) 0.9-1.5% behind without the mask and 3.7-4.5% with it, so TALL keeps eight
# (attention-prefill-configs-*row-sums*-h100-*.json). Over the 96 shapes, the dispatch with it and, in later
# processes, without it differed by about as much as the unchanged kernels moved between them (1-2% against `_r1` at
# D=128 without the mask, against the twins above; attention-prefill-*row-sums*-h100-*.json); the dispatch's kernel
# without it beside the same kernel named, in the same rounds (`--configs dispatch-r1,dispatch+r1`, four processes):
# 0.5-1.5% slower with the mask from L=4096, 0.0-1.2% faster without it, so it stays
# (attention-prefill-configs*-dispatch-row-sums*-h100-*.json). Snake order without the mask, where the items are
# equal, measured 3% behind plain order on one start of an H100 and 0.3-0.8% ahead on another: it stays.
# P's exponentials ahead of the tile's maximum (`_xa`, wgmma_ws_ahead: a tile whose rows grew past 2^8 runs again) on
# an H100, the dispatch's kernel with it beside the same kernel without it, in the same rounds, four processes
# (attention-prefill-configs*-exp-ahead*-h100-*.json): 5-11% faster in every D=128 group, 1.055x-1.070x of cuDNN
# without the mask from L=4096 against 0.948x-0.965x; the dispatch with it 1.088x-1.110x of cuDNN at D=128 from
# L=4096. On scores that rise about 2^8 a tile (most tiles then run twice) 61% more cycles a tile
# (prefill-item-trace-exp-ahead-rising-*.json); on scores stepped 6 units up once 13% fewer, as on the benchmark's
# (prefill-item-trace-exp-ahead-own-max-*.json).
WIDE_PERSIST = WsConfig(wg=3, bn=64, stages=4, pwarps=4, tma=3, persist=True, preg=32, crescale=True, own_tiles=True,
                        snake=True, uniform=True, row_sums_once=True, exp_ahead=True)
# Where a call has more K / V heads than a quarter of the persistent grid (B 4, Hkv 32 in the benchmark), the items
# a section of heads at a time (`_hs`, wgmma_ws_text.head_sections): a round then reads each K / V head with about
# four items instead of one. On an H100 side by side in two processes, at B 4, Hkv 32 against the dispatch's column:
# D=128 1.063x / 1.068x of its speed below L=4096 and 1.049x / 1.048x from it (TALL with 32 producer registers, which
# `_hs` needs: 1.022x / 1.024x and 1.105x / 1.100x at D=64); on the other shapes, whose order `_hs` leaves as it is,
# level at D=128 and 1-3.5% behind at D=64, so they keep the kernels above (wgmma_ws_grid.sections_reorder;
# attention-prefill-configs-head-sections-*-h100-*.json).
WIDE_SECTIONS = replace(WIDE_PERSIST, sections=True)
TALL_SECTIONS = replace(TALL, preg=32, sections=True)
# Without the mask, where the persistent launch's last round holds at most half the grid's items (B 1 at L=4096 and
# 8192, B 4 at L=4096 in the benchmark), those items split along the keys (`_kt`, wgmma_ws_tail), as WIDE_SECTIONS
# with `_kt` was measured (its counters then chained from launch to launch; a new zeroed array a call since, which
# passed the H200's GPU checks). On an H100 with the calls chained as a model's layers are (`bench attention --calls
# chained`), named beside the dispatch in two processes: 1.075x / 1.083x of its speed at B 1, L=4096, 1.047x / 1.048x
# at B 1, L=8192 and 1.042x / 1.048x at B 4, L=4096; D=128 from L=4096 composed 0.994x / 1.001x of cuDNN against
# 0.975x / 0.979x. With the calls independent, free to overlap (the next call's first blocks fill the last round),
# 0.977x / 1.011x / 1.017x there, D=128 from L=4096 0.969x against 0.968x (one process;
# attention-prefill-configs-*key-split-tail*-h100-*.json). On the H200, the dispatch's own column with it: D=128 from
# L=4096 0.978x / 0.973x of cuDNN independent, 0.995x / 0.994x chained (attention-prefill-*key-split-tail*-h200.json).
WIDE_SPLIT_TAIL = replace(WIDE_SECTIONS, ktail=True)


def wgmma_config(q: Any, k: Any, causal: bool) -> WgmmaConfig | WsConfig:
    """TALL at D=64, where S is a multiple of 128 keys; WIDE_PERSIST at D=128; WIDE elsewhere; the persistent two
    with their heads in sections where a call has more K / V heads than a section (TALL_SECTIONS, WIDE_SECTIONS),
    WIDE_PERSIST's last round split along the keys where it splits (WIDE_SPLIT_TAIL);
    each with bulk copies from tile images of K / V (one extra pass over them, one block an item) where no tensor map
    can be made (`wgmma_ws.tma_ready`). KSEARCH_WGMMA_CONFIG names another (wgmma_ws.parse_config: e.g. wg3_n64,
    ws3_n64_s4_p4_bulk)."""
    name = os.environ.get("KSEARCH_WGMMA_CONFIG", "").strip()
    if name:
        try:
            return wgmma_ws.parse_config(name)
        except ValueError as exc:
            raise ValueError(f"KSEARCH_WGMMA_CONFIG={name!r}: {exc}; or leave it unset") from None
    if q.shape[-1] == 64 and wgmma_ws.supports(q, k, k, causal, TALL):
        cfg = TALL
    elif q.shape[-1] == 128 and wgmma_ws.supports(q, k, k, causal, WIDE_PERSIST):
        cfg = WIDE_PERSIST
    else:
        cfg = WIDE
    if cfg == WIDE_PERSIST and wgmma_ws_grid.tail_splits(tuple(q.shape), tuple(k.shape), causal, cfg):
        cfg = WIDE_SPLIT_TAIL
    elif cfg.persist and wgmma_ws_grid.sections_reorder(tuple(q.shape), tuple(k.shape), cfg):
        cfg = TALL_SECTIONS if cfg == TALL else WIDE_SECTIONS
    if not wgmma_ws.tma_ready(tuple(k.shape), cfg.bn, cfg.tma):
        return wgmma_ws.with_bulk_copies(cfg)
    return cfg


def prefill_config(q: Any, k: Any, causal: bool) -> PrefillConfig:
    """The mma.sync configuration measured best on the H200 (docs/kernels-attention.md); used where wgmma is not."""
    # 8 warps (BM=128) share each K/V tile between twice the rows of BM=64: half the tile loads per FLOP. Measured
    # as the default on the H200 for both head dims (benchmarks/findings.md, the mma.sync row).
    return PrefillConfig(bm=128, bn=64, db=True)


def tf32_enabled() -> bool:
    """MLX_ENABLE_TF32 as MLX reads it: unset or nonzero -> MLX runs float32 matmuls (its attention's among them) as
    TF32 on CUDA; 0 -> at fp32's accuracy."""
    return os.environ.get("MLX_ENABLE_TF32", "1").strip() != "0"


def tf32x3_preferred(q_shape: tuple[int, ...], k_shape: tuple[int, ...], v_shape: tuple[int, ...],
                     dtypes: tuple[Any, ...], causal: bool, tf32: bool) -> bool:
    """float32 on CUDA: the 3xTF32 kernel (tf32x3.py, fp32's accuracy on tensor cores) where it fits, from L and S of
    F32_KERNEL_FROM (shorter calls not measured), and was measured ahead of MLX's float32 attention on an H100
    (`prefill_fp32.py bench`, docs/kernels-attention.md): with TF32 off (MLX_ENABLE_TF32=0, `tf32` False) at every
    shape, 1.60x-4.7x; with TF32 on (MLX's default, its attention then at TF32's accuracy) with the causal mask or at
    D=64, 1.22x-3.7x. At D=128 without the mask MLX's TF32 attention stays: the kernel was 0.75x-0.78x of it from
    L=2048 (1.00x-1.11x at L=512)."""
    cfg = tf32x3.default_config(q_shape[-1])
    return (tf32x3.supports_shapes(q_shape, k_shape, v_shape, dtypes, causal, cfg)
            and min(q_shape[2], k_shape[2]) >= F32_KERNEL_FROM and (not tf32 or causal or q_shape[-1] == 64))


F32_KERNEL_FROM = 128


def native_attention(q: Any, k: Any, v: Any, causal: bool = False) -> Any:
    import mlx.core as mx

    return mx.fast.scaled_dot_product_attention(q, k, v, scale=1.0 / math.sqrt(q.shape[-1]),
                                                mask="causal" if causal else None)


class ArraySpec(NamedTuple):
    """What the dispatch reads of an input array: the CUDA plan is made from these, once per shape."""

    shape: tuple[int, ...]
    dtype: Any


Runner = Callable[[Any, Any, Any], Any]


class MetalConfig(NamedTuple):
    """A Metal prefill kernel named outright (`attention(..., config=)`, `ksearch bench attention --configs`), one of
    METAL_KERNELS: metal_simdgroup (the dispatch's for float16 and float32), metal_fragments (the same loop with the softmax in
    registers, metal_fragments.py) or metal_rows (any dtype). Where it does not fit the inputs, MLX's attention runs."""

    kernel: str


METAL_KERNELS = ("metal_simdgroup", "metal_fragments", "metal_rows")
Config = PrefillConfig | WgmmaConfig | WsConfig | MetalConfig
CONFIG_TYPES = (PrefillConfig, WgmmaConfig, WsConfig, MetalConfig)


def parse_prefill_config(name: str) -> WgmmaConfig | WsConfig | MetalConfig | DispatchVariant:
    """A configuration name as `--configs` takes it: a Metal kernel (METAL_KERNELS), a variant of the dispatch
    (`dispatch-r1`: dispatch_variant) or a wgmma configuration (wgmma_ws.parse_config); ValueError in one line for
    none of them."""
    if name.startswith("dispatch"):
        return parse_dispatch_variant(name)
    if name.startswith("metal_"):
        if name not in METAL_KERNELS:
            raise ValueError(f"{name!r}: no such Metal prefill kernel; name one of {', '.join(METAL_KERNELS)}")
        return MetalConfig(name)
    return wgmma_ws.parse_config(name)


def metal_prefill_setting() -> str | None:
    """KSEARCH_METAL_PREFILL: unset -> the dispatch's choice; a name of METAL_KERNELS -> that kernel wherever it fits
    (e.g. metal_fragments, for a model's own calls); ValueError in one line for any other value."""
    name = os.environ.get("KSEARCH_METAL_PREFILL", "").strip()
    if name and name not in METAL_KERNELS:
        raise ValueError(f"KSEARCH_METAL_PREFILL={name!r}: name one of {', '.join(METAL_KERNELS)}, or leave it unset")
    return name or None


def prefill_plan(q: Any, k: Any, v: Any, causal: bool = False, *, use_metal: bool | None = None,
                 config: Config | None = None) -> tuple[str, Callable[[], Any]]:
    """(name of the kernel `attention` runs for these inputs, a call that runs it): the dispatch, inspectable without
    running anything (`ksearch bench attention` records the name per shape). Names: a wgmma configuration as
    KSEARCH_WGMMA_CONFIG spells it (e.g. ws3_n64_s4_p4_bulk), mma_sync_mBM_nBN[_db], mma_tf32x3_m64_n32_qr_fl
    / mma_tf32x3_m128_n32_fl (float32), metal_simdgroup, metal_fragments, metal_rows, native. Checks its arguments
    as `attention` does."""
    name, run = _checked_plan(q, k, v, causal, use_metal, config)
    return name, lambda: run(q, k, v)


def attention(q: Any, k: Any, v: Any, causal: bool = False, *, use_metal: bool | None = None,
              config: Config | None = None) -> Any:
    """softmax(q k^T / sqrt(D) + causal mask) v; q (B, Hq, L, D), k/v (B, Hkv, S, D), mask aligned lower right.

    q, k and v: mx.arrays of one dtype (float16, bfloat16 or float32), Hq a multiple of Hkv, S >= 1 (with `causal`
    S >= L); anything else is a TypeError or ValueError naming the argument, before anything runs. The scale is
    1 / sqrt(D) and the only mask the causal one: for others, `mx.fast.scaled_dot_product_attention`.
    On CUDA: the wgmma kernel on Hopper (see `wgmma_enabled`), else the mma.sync one; `config` picks a kernel and
    configuration outright (it still falls back to native where that kernel does not fit the shape or the backend).
    `prefill_plan` says which kernel that is."""
    return _checked_plan(q, k, v, causal, use_metal, config)[1](q, k, v)


CAUSAL_HINT = (" (the mask aligned lower right; attention takes no mask array: other masks go to "
               "mx.fast.scaled_dot_product_attention)")


def _checked_plan(q: Any, k: Any, v: Any, causal: Any, use_metal: Any, config: Any) -> tuple[str, Runner]:
    fn = "attention"
    if not (isinstance(q, arguments.Array) and isinstance(k, arguments.Array) and isinstance(v, arguments.Array)):
        arguments.require_arrays(fn, {"q": q, "k": k, "v": v})
    causal = arguments.flag(fn, "causal", causal, CAUSAL_HINT)
    use_metal = arguments.optional_flag(fn, "use_metal", use_metal)
    arguments.require_config(fn, config, CONFIG_TYPES, "parse_prefill_config(name) reads a name")
    return _plan(q, k, v, causal, use_metal, config)


def _plan(q: Any, k: Any, v: Any, causal: bool, use_metal: bool | None, config: Config | None) -> tuple[str, Runner]:
    where = device.backend()
    if where == "cuda" and not isinstance(config, MetalConfig):
        # Everything the CUDA choice depends on is in the key (the settings read here, each call), so the choice,
        # its shape checks and its name are made once per shape: made every call they were 4-7 us of a call's host
        # time, which a short prefill pays in full when calls queue faster than the host makes them.
        return _cuda_plan(tuple(q.shape), tuple(k.shape), tuple(v.shape), (q.dtype, k.dtype, v.dtype), bool(causal),
                          config, os.environ.get("KSEARCH_WGMMA", ""), os.environ.get("KSEARCH_WGMMA_CONFIG", ""),
                          tf32_enabled())
    if arguments.attention_shapes(q.shape, k.shape, v.shape, (q.dtype, k.dtype, v.dtype), causal):
        return "native", arguments.empty_output  # no kernel on an empty grid; MLX 0.32's fails at Hq = 0
    if where == "metal" and device.metal_enabled(use_metal) and (config is None or isinstance(config, MetalConfig)):
        return _metal_plan(q, k, v, causal, config.kernel if config else metal_prefill_setting())
    return "native", lambda q, k, v: native_attention(q, k, v, causal)


def _metal_plan(q: Any, k: Any, v: Any, causal: bool, want: str | None) -> tuple[str, Runner]:
    """float16 and float32: the simdgroup_matrix kernel (or the one with the softmax in registers, named outright);
    bfloat16: the row kernel. None has run on Apple hardware."""
    from ksearch.kernels.attention import metal_fragments, metal_rows, metal_simdgroup

    if want in (None, "metal_simdgroup", "metal_fragments") and metal_simdgroup.supports(q, k, v, causal):
        if want == "metal_fragments":
            return want, lambda q, k, v: metal_fragments.attention_metal_fragments(q, k, v, causal)
        return "metal_simdgroup", lambda q, k, v: metal_simdgroup.attention_metal_mma(q, k, v, causal)
    if want in (None, "metal_rows") and metal_rows.supports_prefill(q, k, v, causal):
        return "metal_rows", lambda q, k, v: metal_rows.attention_metal(q, k, v, causal)
    return "native", lambda q, k, v: native_attention(q, k, v, causal)


def clear_plans() -> None:
    """Forget the per-shape CUDA plans: for a process that changes what they depend on beyond the two settings in
    their key (the device's answers, whether a tensor map can be made), as tests do."""
    _cuda_plan.cache_clear()


@lru_cache(maxsize=1024)
def _cuda_plan(q_shape: tuple[int, ...], k_shape: tuple[int, ...], v_shape: tuple[int, ...], dtypes: tuple[Any, ...],
               causal: bool, config: PrefillConfig | WgmmaConfig | WsConfig | None, wgmma_setting: str,
               config_setting: str, tf32: bool) -> tuple[str, Runner]:
    """The CUDA dispatch for one shape (the settings are the key's: `wgmma_enabled` and `wgmma_config` read two of
    them, `tf32` is `tf32_enabled()`).
    The runners look their kernel function up when called, so what they run is always the module's. The arguments'
    checks (`arguments.attention_shapes`) come first, so they too are made once per key."""
    if arguments.attention_shapes(q_shape, k_shape, v_shape, dtypes, causal):
        return "native", arguments.empty_output
    if config is None and tf32x3_preferred(q_shape, k_shape, v_shape, dtypes, causal, tf32):
        cfg32 = tf32x3.default_config(q_shape[-1])
        return cfg32.name(), lambda q, k, v: tf32x3.attention_tf32x3(q, k, v, causal, cfg32)
    q, k, v = ArraySpec(q_shape, dtypes[0]), ArraySpec(k_shape, dtypes[1]), ArraySpec(v_shape, dtypes[2])
    chosen = wgmma_config(q, k, causal) if config is None and wgmma_enabled() else config
    if isinstance(chosen, WsConfig) and wgmma_ws.supports(q, k, v, causal, chosen):
        ws = chosen
        return wgmma_ws.config_name(ws), lambda q, k, v: wgmma_ws.attention_wgmma_ws(q, k, v, causal, ws)
    if isinstance(chosen, WgmmaConfig) and wgmma.supports(q, k, v, causal, chosen):
        wg = chosen
        return wgmma_ws.config_name(wg), lambda q, k, v: wgmma.attention_wgmma(q, k, v, causal, wg)
    if not isinstance(config, (WsConfig, WgmmaConfig)):  # asked for outright: no other kernel stands in for it
        cfg = config if isinstance(config, PrefillConfig) else prefill_config(q, k, causal)
        if mma_sync.supports(q, k, v, causal, cfg):
            return (f"mma_sync_m{cfg.bm}_n{cfg.bn}{'_db' if cfg.db else ''}",
                    lambda q, k, v: mma_sync.attention_cuda(q, k, v, causal, cfg))
    return "native", lambda q, k, v: native_attention(q, k, v, causal)
