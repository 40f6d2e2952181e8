"""The `attention.cuda.flash_wgmma` template family: FlashAttention on Hopper's wgmma (ksearch.kernels.attention.wgmma,
the same text the library runs), with the mma.sync kernel for GPUs that are not Hopper.

Parameters (the library's knobs, each measured on the H200; docs/kernels-attention.md): warpgroups per block (64 query
rows each; they share every K/V tile), keys per tile, whether a producer warpgroup loads K / V (attention.wgmma_ws,
its registers handed to the consumers through setmaxnreg) or every thread loads with cp.async (the synchronous
kernel), and then: K / V stages; for the producer, tensor copies through a map the candidate encodes on the host with
the 128-byte swizzle (`tma`: the library's Hopper default, 3-5% ahead of the bulk copies over the 96 benchmark
shapes), or tile images and one bulk copy a tile (`bulk`: 0.81-0.82x of cuDNN at L >= 4096 against 0.65x with
cp.async), and ping-pong between consumer warpgroups (`pp`, with bulk copies); with tensor copies, persistent blocks
(`persist`: one block an SM walks the work items, the grid sized by the driver's SM count, its items in snake order;
the library's choice at D=64, 3% ahead there, and with three warpgroups, each multiplying only its own rows' tiles, at
D=128 with the causal mask); the cp.async cache mode (`cp`: cg through L2, ca through L1 too); with a producer, O
rescaled only when a row's maximum grew past 2^8 (`crescale`: the library's choice at D=128, 3-5% less time there,
9-13% more at D=64 with 128-key tiles); P's row sums by one product a tile (`row_sums_once`, `_r1`: the library's
choice at D=128, 2.7% ahead there without the mask and level with it on an H100; 1-4.5% behind with two warpgroups on
128-key tiles); P's exponentials ahead of the tile's maximum (`exp_ahead`, `_xa`, with `crescale`: the library's
choice at D=128, 5-11% ahead there on an H100, a tile whose rows grew past 2^8 run again with its own maximum). 3 x
128 is left out: its registers times 384 threads exceed the register file (206 a thread without launch bounds; spills
with them). A producer with 128-key tiles runs two consumer warpgroups and bulk or tensor copies (168 registers, no
spills; the library's choice at D=64); with cp.async it spilled 208 bytes. Every producer rendering
stores O as the library does, 16 bytes a lane after a transpose within each quad of lanes (0.922x of cuDNN over the 96
shapes for the library's dispatch then against 0.892x with 4-byte stores).
`constants`: the kernels of a (dtype, D, mask) made at its first call with their template arguments as constants in
their headers and called without `template=`, the scale one array a head dim, as the library's kernels are made and
called (MLX formats template arguments into every call); off by default, where the linter reads each call's literal
template list.
"""

from __future__ import annotations

import inspect
from typing import Any

from ksearch.kernels import device, tensor_map
from ksearch.kernels.attention import mma_sync, wgmma, wgmma_ws, wgmma_ws_images
from ksearch.kernels.cuda_headers import MMA_SYNC_HEADER, WGMMA_HEADER
from ksearch.kernels.tensor_map import TMA_HEADER
from ksearch.policy.templates import attention_wgmma_variants as variant_texts
from ksearch.policy.templates.attention_common import RUN_HEAD, fallbacks
from ksearch.policy.templates.attention_wgmma_variants import variant_configs
from ksearch.policy.templates.base import CONSTANT_KERNELS, HOPPER_CHECK, TemplateFamily

# The mma.sync configuration a non-Hopper GPU runs (the library's default there).
_MMA = mma_sync.PrefillConfig(128, 64, True)


def configs(p: dict[str, Any]) -> tuple[Any, Any]:
    """(the synchronous kernel's WgmmaConfig, the producer kernel's WsConfig) for a parameter set; one of them runs."""
    cfg = wgmma.WgmmaConfig(wg=p["wg"], bn=p["bn"], stages=p["stages"], cp=p["cp"])
    # three persistent warpgroups keep their producer at 32 registers, as the library's WIDE_PERSIST does (with 24
    # ptxas spills its item loop); two keep 24, as TALL does (32 measured no faster there). Persistent blocks take
    # their items in snake order, and three persistent warpgroups each only their own tiles with their index
    # arithmetic on the uniform datapath (`_uw`), as the library's do.
    persist = bool(p["persist"])
    preg = 32 if persist and p["wg"] == 3 else 24
    ws = wgmma_ws.WsConfig(wg=p["wg"], bn=p["bn"], stages=p["stages"], pwarps=4, cp=p["cp"],
                           bulk=p["bulk"], pp=p["pp"], tma=3 if p["tma"] else 0, persist=persist, preg=preg,
                           crescale=p["crescale"], own_tiles=persist and p["wg"] == 3, snake=persist,
                           uniform=persist and p["wg"] == 3, row_sums_once=bool(p.get("row_sums_once")),
                           exp_ahead=bool(p.get("exp_ahead")))
    return cfg, ws


def valid(p: dict[str, Any]) -> bool:
    copies = p["bulk"] or p["tma"]  # K / V by the copy engine, which ignores the cp.async cache mode
    if (p["wg"], p["bn"]) == (3, 128) or (copies and p["cp"] != "cg") or (p["bulk"] and p["tma"]):
        return False
    if p["tma"] and (not p["producer"] or p["pp"]):  # tensor copies were checked without ping-pong
        return False
    if p["persist"] and not p["tma"]:  # persistent blocks walk their items with tensor copies only
        return False
    # heads in sections and the split last round are persistent kernels' (the split measured with three warpgroups)
    if (p["sections"] or p["tail"]) and not p["persist"] or p["tail"] and p["wg"] != 3:
        return False
    if p["crescale"] and not p["producer"]:  # the conditional rescale is the producer kernels' knob
        return False
    if (p.get("row_sums_once") or p.get("exp_ahead")) and not p["producer"]:  # so are these two
        return False
    cfg, ws = configs(p)
    if p["producer"]:  # the producer variants checked on the H200: 64-key tiles with 3-4 stages and ping-pong with
        # bulk copies; two warpgroups on 128-key tiles with bulk or tensor copies and 2-3 stages (the library's at D=64)
        tiles = ((p["bn"] == 64 and p["stages"] in (3, 4) and (p["bulk"] or not p["pp"]))
                 or (p["wg"] == 2 and p["bn"] == 128 and p["stages"] in (2, 3) and copies and not p["pp"]))
        return tiles and wgmma_ws.config_problem(ws) is None and ws.smem_bytes(128) <= wgmma.MAX_SMEM
    return (not copies and not p["pp"] and p["stages"] in (2, 3) and cfg.smem_bytes(128) <= wgmma.MAX_SMEM
            and wgmma.fits_registers(cfg, 128))


def render_flash_wgmma(p: dict[str, Any]) -> str:
    cfg, ws = configs(p)
    producer = bool(p["producer"])  # the same kernel at both head dims
    bm, nt = 64 * cfg.wg, 128 * cfg.wg
    mma_nt = _MMA.bm // 16 * 32
    threads = {d: ws.threads() if producer else nt for d in (64, 128)}
    # the producer kernel's own template constants, as the library passes them
    stage = variant_texts.stage_text(ws)
    extra = {d: stage if producer else "" for d in (64, 128)}
    bulk = bool(p["producer"] and p["bulk"])
    tma = bool(p["producer"] and p["tma"])
    persist = tma and bool(p["persist"])
    images = {d: "\n            k, v = _images(k, v)" if bulk else "" for d in (64, 128)}
    # tensor copies: the map (made once per K shape) as an input, a scratch output for each block's published maps
    tmap = f", _tmap(tuple(k.shape), {cfg.bn})" if tma else ""
    # persistent blocks: one an SM (never more than work items), in one row of the grid
    items = f"(length + {bm - 1}) // {bm} * b * hq"
    blocks = f"min({items}, cuda_sm_count())" if persist else items
    maps = f", ({blocks} * 32 + 16,)" if tma else ""
    grid = {d: (f"({blocks} * {threads[d]}, 1, 1)" if persist
                else f"((length + {bm - 1}) // {bm} * {threads[d]}, b * hq, 1)") for d in (64, 128)}
    constants = bool(p.get("constants"))
    wg_args = {d: f'("T", q.dtype), ("D", {d}), ("WG", {cfg.wg}), ("BN", {cfg.bn}), ("CAUSAL", bool(causal)){extra[d]}'
               for d in (64, 128)}
    mma_args = f'("BM", {_MMA.bm}), ("BN", {_MMA.bn}), ("CAUSAL", bool(causal)), ("DB", {_MMA.db})'
    # with constants the kernel of a (dtype, D, mask) is made at its first call, its template arguments in its header
    wg_fn = {d: f"_kernel(\"wg\", q.dtype, {d}, bool(causal))" if constants else f"_wg{d}" for d in (64, 128)}
    mma_fn = {d: f"_kernel(\"mma\", q.dtype, {d}, bool(causal))" if constants else f"_mma{d}" for d in (64, 128)}
    wg_tmpl = {d: "" if constants else f"\n                          template=[{wg_args[d]}]," for d in (64, 128)}
    mma_tmpl = {d: "" if constants else f'''
                           template=[("T", q.dtype), ("D", {d}), ("BM", {_MMA.bm}), ("BN", {_MMA.bn}), ("CAUSAL", bool(causal)),
                                     ("DB", {_MMA.db})],''' for d in (64, 128)}
    variants = variant_configs(ws, p) if persist else {"plain": ws}
    variant_calls = persist and len(variants) > 1  # `_hs` / `_kt` where the dispatch takes them: a kernel a call
    wg_calls = "\n".join(variant_texts.calls(variants, d, threads[d], constants) for d in (64, 128)) if (
        variant_calls) else "\n".join(f'''        if d == {d}:{images[d]}
            return {wg_fn[d]}(inputs=[q, k, v, scale{tmap}],{wg_tmpl[d]}
                          grid={grid[d]}, threadgroup=({threads[d]}, 1, 1),
                          output_shapes=[q.shape{maps}], output_dtypes=[q.dtype{", mx.uint64" if tma else ""}])[0]'''
                         for d in (64, 128))
    mma_calls = "\n".join(f'''        if d == {d}:
            return {mma_fn[d]}(inputs=[q, k, v, scale],{mma_tmpl[d]}
                           grid=(length // {_MMA.bm} * {mma_nt}, b * hq, 1), threadgroup=({mma_nt}, 1, 1),
                           output_shapes=[q.shape], output_dtypes=[q.dtype])[0]''' for d in (64, 128))
    # Module-level kernel objects, one per head dim (shared memory differs), and literal launch sizes: the project's
    # linter reads them (whole warpgroups for wgmma, shared memory within the chip's limit).
    smem = {d: ws.smem_bytes(d) if producer else cfg.smem_bytes(d) for d in (64, 128)}
    branches = variant_texts.maker_branches(variants, threads[128], smem) if variant_calls else ""
    kernels = constant_kernels(cfg, ws, producer, tma, wg_args[128], mma_args, branches) if constants else "\n".join(
        f'''_wg{d} = mx.fast.cuda_kernel(name="flash_wgmma_d{d}", input_names=["q", "k", "v", "scale"{', "tmap"' if tma else ""}],
                             output_names=["o"{', "maps"' if tma else ""}],
                             source={"WS_SOURCE" if producer else "WG_SOURCE"}, header=WG_HEADER_{threads[d]},
                             shared_memory={ws.smem_bytes(d) if producer else cfg.smem_bytes(d)})
_mma{d} = mx.fast.cuda_kernel(name="flash_mma_d{d}", input_names=["q", "k", "v", "scale"], output_names=["o"],
                              source=MMA_SOURCE, header=MMA_HEADER, shared_memory={_MMA.smem_bytes(d)})'''
        + (variant_texts.objects(variants, d, threads[d], smem[d]) if variant_calls else "") for d in (64, 128))
    pre = wgmma.cp_cache(cfg.cp)[0]  # the cp.async cache mode
    copy_header = TMA_HEADER if tma else wgmma_ws.BULK_HEADER
    headers = "\n".join(f"WG_HEADER_{t} = {pre + WGMMA_HEADER + copy_header + wgmma.launch_bounds(t)!r}"
                         for t in sorted(set(threads.values())))
    source = wgmma_ws.source_text(ws)  # the library's text for the configuration, its epilogue included
    ws_source = f"WS_SOURCE = {source!r}" if producer else ""
    if variant_calls:  # the other kernels a call may take, and the dispatch's rules between them
        ws_source += variant_texts.sources(variants)
    image_call = '_kernel("image", None, k.shape[-1], False)' if constants else "_image"
    image_tmpl = "" if constants else ' template=[("D", k.shape[-1])],'
    image_object = "" if constants else '''
_image = mx.fast.cuda_kernel(name="tile_image", input_names=["k", "v"], output_names=["ki", "vi"], source=IMAGE_SOURCE)'''
    image = f'''IMAGE_SOURCE = {wgmma_ws_images.IMAGE_SOURCE!r}{image_object}


def _images(k, v):  # K / V with each 8-row block stored as its core matrices: one bulk copy a tile
    return {image_call}(inputs=[k, v],{image_tmpl} grid=(k.size // 8, 1, 1), threadgroup=({wgmma_ws_images.IMAGE_THREADS}, 1, 1),
                  output_shapes=[k.shape, v.shape], output_dtypes=[k.dtype, v.dtype])
''' if bulk else ""
    how = ("tensor copies of 64-column boxes with the 128-byte swizzle through a map encoded on the host"
           + (", persistent blocks (one an SM walks the work items)" if persist else "") if tma else
           "one bulk copy a tile from tile images" if bulk else "cp.async")
    loads = ((f"a producer warpgroup: {how}, {ws.stages} "
              f"stages{', ping-pong between consumer warpgroups' if ws.pp else ''}; it gives the consumers its registers "
              "(setmaxnreg)") if p["producer"] else f"cp.async, {cfg.stages} stages")
    return f'''# attention.cuda.flash_wgmma {p}
# FlashAttention on Hopper's wgmma (sm_90a): {cfg.wg} warpgroups of 64 query rows share each {cfg.bn}-key K/V tile
# ({loads}),
# S = Q K^T from shared memory, P from the accumulator registers into O += P V, the softmax of tile t issued while
# P(t-1) V(t-1) runs.
# Not Hopper: the mma.sync FlashAttention-2 kernel.
import math

import mlx.core as mx

{headers}
WG_SOURCE = {wgmma.source(cfg.stages)!r}
{ws_source}
{image}{tensor_map_code(cfg.bn, persist) if tma else ""}{variant_texts.host_code(p, bm, cfg.bn) if variant_calls else ""}
MMA_HEADER = {MMA_SYNC_HEADER!r}
MMA_SOURCE = {mma_sync.SOURCE!r}
{kernels}

{HOPPER_CHECK}{fallbacks()}{RUN_HEAD}    if q.dtype not in (mx.float16, mx.bfloat16) or d not in (64, 128) or (causal and length > s):
        return _ops(q, k, v, causal)
    scale = {"_scale(d)" if constants else "mx.array([1.0 / math.sqrt(d)], dtype=mx.float32)"}
    if _HOPPER and length % 64 == 0 and s % {cfg.bn} == 0:
{wg_calls}
    if length % {_MMA.bm} == 0 and s % {_MMA.bn} == 0:
{mma_calls}
    return _ops(q, k, v, causal)
'''


def constant_kernels(cfg: Any, ws: Any, producer: bool, tma: bool, wg_args: str, mma_args: str,
                     branches: str = "") -> str:
    """The candidate's `_kernel(kind, dtype, D, causal)` (kind "wg", "mma" or "image", and "wg_hs" / "wg_kt" from
    `branches`, attention_wgmma_variants.maker_branches): each kernel made at its first call with its template
    arguments as constants in its header (base.CONSTANT_KERNELS), as the library makes its own
    (kernel_text.constant_lines); and `_scale(D)`, 1 / sqrt(D) made once a head dim, as the library keeps it."""
    def consts(args: str) -> str:  # the call's template list, over the maker's arguments
        return args.replace("q.dtype", "dtype").replace("bool(causal)", "causal").replace('("D", 128)', '("D", d)')

    smem = {d: ws.smem_bytes(d) if producer else cfg.smem_bytes(d) for d in (64, 128)}
    threads = ws.threads() if producer else 128 * cfg.wg
    maps = (', "tmap"', ', "maps"') if tma else ("", "")
    return CONSTANT_KERNELS + f'''

def _kernel(kind, dtype, d, causal):
    # The kernel of one (kind, dtype, D, mask), made at its first call.
    key = (kind, dtype, d, causal)
    kern = _MADE.get(key)
    if kern is None:
        if kind == "wg":
            kern = _make("flash_wgmma", {"WS_SOURCE" if producer else "WG_SOURCE"}, ["q", "k", "v", "scale"{maps[0]}],
                         ["o"{maps[1]}], WG_HEADER_{threads}, ({consts(wg_args)}),
                         {smem[64]} if d == 64 else {smem[128]}, True)
{branches}        elif kind == "mma":
            kern = _make("flash_mma", MMA_SOURCE, ["q", "k", "v", "scale"], ["o"], MMA_HEADER,
                         (("T", dtype), ("D", d), {consts(mma_args)}),
                         {_MMA.smem_bytes(64)} if d == 64 else {_MMA.smem_bytes(128)}, True)
        else:  # the tile images of K / V
            kern = _make("tile_image", IMAGE_SOURCE, ["k", "v"], ["ki", "vi"], "", (("D", d),), 0, True)
        _MADE[key] = kern
    return kern


_SCALES = {{}}


def _scale(d):
    # 1 / sqrt(D) as a one-element array, made once a head dim: a new array a call is host work on every call.
    scale = _SCALES.get(d)
    if scale is None:
        scale = _SCALES[d] = mx.array([1.0 / math.sqrt(d)], dtype=mx.float32)
    return scale
'''


def tensor_map_code(bn: int, persist: bool = False) -> str:
    """The host side of tensor copies in a candidate: kernels/tensor_map.py's encoding (the driver's
    cuTensorMapEncodeTiled through ctypes) and wgmma_ws's map geometry, as the library runs them; with `persist`
    also kernels/device.py's SM count, which sizes a persistent grid."""
    parts = [inspect.getsource(f) for f in (tensor_map._encode_fn, tensor_map.check_geometry, tensor_map.encode,
                                            tensor_map.map_input, wgmma_ws.tma_geometry, wgmma_ws.tma_swizzle)]
    if persist:  # the candidate defines its own BackendUnavailable (below), not the project's
        count = device.CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT
        parts.append(f"CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT = {count}\n\n\n"
                     + inspect.getsource(device.cuda_sm_count).replace(
                         "    from ksearch.errors import BackendUnavailable\n\n", ""))
    return f'''
import ctypes
from collections.abc import Sequence
from functools import cache
from typing import Any


class BackendUnavailable(RuntimeError):  # no CUDA driver to encode a map, or one that refuses it
    pass


UINT16 = {tensor_map.UINT16}
L2_PROMOTION_128B = {tensor_map.L2_PROMOTION_128B}
SWIZZLE_BYTES = {tensor_map.SWIZZLE_BYTES!r}


''' + "\n\n".join(parts) + f'''

def _tmap(k_shape, bn):  # the swizzled map over K (and V, same shape) for {bn}-key tiles
    return map_input(*tma_geometry(k_shape, bn, 3), swizzle=tma_swizzle(3))
'''


FLASH_WGMMA = TemplateFamily(
    id="attention.cuda.flash_wgmma", tasks=("attention",), backends=("mlx-cuda",),
    patterns=("tensor_core_mma", "online_softmax", "exp2_trick", "threadgroup_tiling", "double_buffering",
              "causal_block_skipping", "gqa_head_grouping"),
    # The first choice of each is the library's Hopper kernel at D=128 (WIDE_PERSIST:
    # ws3_n64_s4_p4_tmas_pst_preg32_cr_wt_sn_uw_r1_xa, with `_hs` and `_kt` where the dispatch takes them).
    params={"wg": (3, 2), "bn": (64, 128), "producer": (True, False), "tma": (True, False), "bulk": (False, True),
            "stages": (4, 3, 2), "pp": (False, True), "cp": ("cg", "ca"), "persist": (True, False),
            "crescale": (True, False), "sections": (True, False), "tail": (True, False), "row_sums_once": (True, False),
            "exp_ahead": (True, False), "constants": (False, True)},
    render=render_flash_wgmma,
    valid=valid,
    pattern_params={"double_buffering": {"stages": (4, 3)}},
    description="FlashAttention on wgmma (Hopper): warpgroups share K/V tiles; mma.sync elsewhere")
