"""The `attention.cuda.flash_wgmma` template family: FlashAttention on Hopper's wgmma (ksearch.kernels.attention.wgmma,
the same text the library runs), with the mma.sync kernel for GPUs that are not Hopper.

Parameters (the library's knobs, each measured on the H200; docs/kernels-attention.md): warpgroups per block (64 query rows
each; they share every K/V tile), keys per tile, whether a producer warpgroup loads K / V (attention.wgmma_ws, its
registers handed to the consumers through setmaxnreg) or every thread loads with cp.async (the synchronous kernel),
and then: K / V stages; for the producer, tile images and one bulk copy a tile (`bulk`: the library's Hopper default,
0.81-0.82x of cuDNN at L >= 4096 against 0.65x with cp.async) and ping-pong between consumer warpgroups (`pp`, with
bulk copies); the cp.async cache mode (`cp`: cg through L2, ca through L1 too). 3 x 128 is left out: its registers
times 384 threads exceed the register file (206 a thread without launch bounds; spills with them). A producer with
128-key tiles runs two consumer warpgroups and bulk copies (168 registers, no spills; the library's choice at D=64
from L=4096); with cp.async it spilled 208 bytes.
"""

from __future__ import annotations

from typing import Any

from ksearch.kernels.attention import mma_sync, wgmma, wgmma_ws
from ksearch.kernels.cuda_headers import MMA_SYNC_HEADER, WGMMA_HEADER
from ksearch.policy.templates.attention_common import RUN_HEAD, fallbacks
from ksearch.policy.templates.base import TemplateFamily

# The mma.sync configuration a non-Hopper GPU runs (the library's default there).
_MMA = mma_sync.PrefillConfig(128, 64, True)


def configs(p: dict[str, Any]) -> tuple[Any, Any]:
    """(the synchronous kernel's WgmmaConfig, the producer kernel's WsConfig) for a parameter set; one of them runs."""
    cfg = wgmma.WgmmaConfig(wg=p["wg"], bn=p["bn"], stages=p["stages"], cp=p["cp"])
    ws = wgmma_ws.WsConfig(wg=p["wg"], bn=p["bn"], stages=p["stages"], pwarps=4, cp=p["cp"],
                                     bulk=p["bulk"], pp=p["pp"])
    return cfg, ws


def valid(p: dict[str, Any]) -> bool:
    if (p["wg"], p["bn"]) == (3, 128) or (p["bulk"] and p["cp"] != "cg"):
        return False
    cfg, ws = configs(p)
    if p["producer"]:  # the producer variants checked on the H200: 64-key tiles with 3-4 stages and ping-pong with
        # bulk copies; two warpgroups on 128-key tiles with bulk copies and 2-3 stages (the library's at D=64, L >= 4096)
        tiles = ((p["bn"] == 64 and p["stages"] in (3, 4) and (p["bulk"] or not p["pp"]))
                 or (p["wg"] == 2 and p["bn"] == 128 and p["stages"] in (2, 3) and p["bulk"] and not p["pp"]))
        return tiles and wgmma_ws.config_problem(ws) is None and ws.smem_bytes(128) <= wgmma.MAX_SMEM
    return (not p["bulk"] and not p["pp"] and p["stages"] in (2, 3) and cfg.smem_bytes(128) <= wgmma.MAX_SMEM
            and wgmma.fits_registers(cfg, 128))


def render_flash_wgmma(p: dict[str, Any]) -> str:
    cfg, ws = configs(p)
    producer = bool(p["producer"])  # the same kernel at both head dims
    bm, nt = 64 * cfg.wg, 128 * cfg.wg
    mma_nt = _MMA.bm // 16 * 32
    threads = {d: nt + (128 if producer else 0) for d in (64, 128)}
    # the producer kernel's own template constants, as the library passes them
    stage = "".join(f", ({name!r}, {value!r})" for name, value in wgmma_ws.stage_args(ws)).replace("'", '"')
    extra = {d: stage if producer else "" for d in (64, 128)}
    bulk = bool(p["producer"] and p["bulk"])
    images = {d: "\n            k, v = _images(k, v)" if bulk else "" for d in (64, 128)}
    wg_calls = "\n".join(f'''        if d == {d}:{images[d]}
            return _wg{d}(inputs=[q, k, v, scale],
                          template=[("T", q.dtype), ("D", {d}), ("WG", {cfg.wg}), ("BN", {cfg.bn}), ("CAUSAL", bool(causal)){extra[d]}],
                          grid=((length + {bm - 1}) // {bm} * {threads[d]}, b * hq, 1), threadgroup=({threads[d]}, 1, 1),
                          output_shapes=[q.shape], output_dtypes=[q.dtype])[0]''' for d in (64, 128))
    mma_calls = "\n".join(f'''        if d == {d}:
            return _mma{d}(inputs=[q, k, v, scale],
                           template=[("T", q.dtype), ("D", {d}), ("BM", {_MMA.bm}), ("BN", {_MMA.bn}), ("CAUSAL", bool(causal)),
                                     ("DB", {_MMA.db})],
                           grid=(length // {_MMA.bm} * {mma_nt}, b * hq, 1), threadgroup=({mma_nt}, 1, 1),
                           output_shapes=[q.shape], output_dtypes=[q.dtype])[0]''' for d in (64, 128))
    # Module-level kernel objects, one per head dim (shared memory differs), and literal launch sizes: the project's
    # linter reads them (whole warpgroups for wgmma, shared memory within the chip's limit).
    kernels = "\n".join(
        f'''_wg{d} = mx.fast.cuda_kernel(name="flash_wgmma_d{d}", input_names=["q", "k", "v", "scale"], output_names=["o"],
                             source={"WS_SOURCE" if producer else "WG_SOURCE"}, header=WG_HEADER_{threads[d]},
                             shared_memory={ws.smem_bytes(d) if producer else cfg.smem_bytes(d)})
_mma{d} = mx.fast.cuda_kernel(name="flash_mma_d{d}", input_names=["q", "k", "v", "scale"], output_names=["o"],
                              source=MMA_SOURCE, header=MMA_HEADER, shared_memory={_MMA.smem_bytes(d)})''' for d in (64, 128))
    pre = wgmma.cp_cache(cfg.cp)[0]  # the cp.async cache mode
    headers = "\n".join(f"WG_HEADER_{t} = {pre + WGMMA_HEADER + wgmma_ws.BULK_HEADER + wgmma.launch_bounds(t)!r}"
                         for t in sorted(set(threads.values())))
    ws_source = f"WS_SOURCE = {wgmma_ws.SOURCE!r}" if producer else ""
    image = f'''IMAGE_SOURCE = {wgmma_ws.IMAGE_SOURCE!r}
_image = mx.fast.cuda_kernel(name="tile_image", input_names=["k", "v"], output_names=["ki", "vi"], source=IMAGE_SOURCE)


def _images(k, v):  # K / V with each 8-row block stored as its core matrices: one bulk copy a tile
    return _image(inputs=[k, v], template=[("D", k.shape[-1])], grid=(k.size // 8, 1, 1), threadgroup=({wgmma_ws.IMAGE_THREADS}, 1, 1),
                  output_shapes=[k.shape, v.shape], output_dtypes=[k.dtype, v.dtype])
''' if bulk else ""
    loads = ((f"a producer warpgroup: {'one bulk copy a tile from tile images' if bulk else 'cp.async'}, {ws.stages} "
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
{image}
MMA_HEADER = {MMA_SYNC_HEADER!r}
MMA_SOURCE = {mma_sync.SOURCE!r}
{kernels}


def _hopper():
    try:
        return int(mx.device_info().get("compute_capability_major", 0)) == 9
    except Exception:
        return False


_HOPPER = _hopper()
{fallbacks()}{RUN_HEAD}    if q.dtype not in (mx.float16, mx.bfloat16) or d not in (64, 128) or (causal and length > s):
        return _ops(q, k, v, causal)
    scale = mx.array([1.0 / math.sqrt(d)], dtype=mx.float32)
    if _HOPPER and length % 64 == 0 and s % {cfg.bn} == 0:
{wg_calls}
    if length % {_MMA.bm} == 0 and s % {_MMA.bn} == 0:
{mma_calls}
    return _ops(q, k, v, causal)
'''


FLASH_WGMMA = TemplateFamily(
    id="attention.cuda.flash_wgmma", tasks=("attention",), backends=("mlx-cuda",),
    patterns=("tensor_core_mma", "online_softmax", "exp2_trick", "threadgroup_tiling", "double_buffering",
              "causal_block_skipping", "gqa_head_grouping"),
    # The first choice of each is the library's Hopper default (ws3_n64_s4_p4_bulk).
    params={"wg": (3, 2), "bn": (64, 128), "producer": (True, False), "bulk": (True, False), "stages": (4, 3, 2),
            "pp": (False, True), "cp": ("cg", "ca")},
    render=render_flash_wgmma,
    valid=valid,
    pattern_params={"double_buffering": {"stages": (4, 3)}},
    description="FlashAttention on wgmma (Hopper): warpgroups share K/V tiles; mma.sync elsewhere")
