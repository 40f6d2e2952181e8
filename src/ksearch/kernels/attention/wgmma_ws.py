"""The wgmma FlashAttention prefill handing K / V stages over through mbarriers instead of `__syncthreads`.

In `wgmma.SOURCE` every thread loads K / V and a `__syncthreads` per tile hands the stages over, which keeps
the block's warpgroups in lockstep: all of them multiply at once and all of them run their softmax at once, so the
tensor cores idle during the softmax. Here one extra warp only loads (`cp.async`, completion tracked by mbarriers
through `cp.async.mbarrier.arrive`), and each consumer warpgroup waits on "full" mbarriers and releases stages on
"empty" ones on its own schedule; the warp scheduler can then run one warpgroup's softmax while another's product is
on the tensor cores. The steps (products, softmax) are the same code as the synchronous kernel's. SOURCE_MB does the
same without a producer (every thread loads, four stages).

A producer warpgroup (PWARPS = 4) hands its registers to the consumers with `setmaxnreg` (it keeps 24; three
consumer warpgroups get 160 each, two get 240): the loads leave the consumers, whose time Nsight Compute found a third
spent on them (cp.async address arithmetic stalled on a full LSU queue, and the per-tile __syncthreads). With cp.async
(ws3_n64_s3_p4) that reached 399-419 TFLOP/s at L=8192, D=128 on the H200 against the synchronous kernel's 352-360.

With BULK the producer is one thread: each K / V tile is one `cp.async.bulk` (no tensor map needed) from tile images
of K and V (tile_images, one extra kernel), completing on the stage's "full" mbarrier by its byte count. That reached
547-553 TFLOP/s at L=8192, D=128 (cuDNN 599-608) and 0.81-0.82x of cuDNN over the 96 benchmark shapes at L >= 4096.
With TMA (SOURCE_TMA: tensor copies through a map encoded on the host, kernels/tensor_map.py) the image pass goes:
with the 128-byte swizzle (TMA 3, one 64-element box per 64 columns) 3-5% faster than the bulk copies over the 96
shapes, so ws3_n64_s4_p4_tmas is the Hopper default at D=128 and ws2_n128_s3_p4_tmas (two consumer warpgroups on
128-key tiles) at D=64, the bulk copies where no map can be made (kernels/attention/__init__.py); the no-swizzle
boxes of 16 bytes innermost (TMA 1, 2) were correct but slower than the tile images. Others are opt-in:
KSEARCH_WGMMA_CONFIG; among them PP (ping-pong turns on the tensor cores), correct on the H200 but 0-5% slower at most
shapes.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import cache, lru_cache
from typing import Any

from ksearch.errors import BackendUnavailable
from ksearch.kernels.attention.cuda_prefill import (
    blocks_for,
    build_kernel,
    fits_shapes,
    launch,
    launch_args,
    shape_launch,
    softmax_scale,
)
from ksearch.kernels.attention.wgmma import (
    EPILOGUE,
    EPILOGUE_BULK,
    EPILOGUE_STORE4,
    MAX_SMEM,
    SM_SMEM,
    cp_cache,
    launch_bounds,
)
from ksearch.kernels.attention.wgmma_ws_ahead import exp_ahead
from ksearch.kernels.attention.wgmma_ws_grid import extra_io, persistent_blocks
from ksearch.kernels.attention.wgmma_ws_images import tile_images
from ksearch.kernels.attention.wgmma_ws_names import NAME_FLAGS, flags_tag
from ksearch.kernels.attention.wgmma_ws_q_tma import q_by_tensor_copy
from ksearch.kernels.attention.wgmma_ws_row_sums import row_sums_once
from ksearch.kernels.attention.wgmma_ws_tail import fresh_counters, key_split_tail
from ksearch.kernels.attention.wgmma_ws_text import (  # the kernels' text; the rest of it in wgmma_ws_text
    BULK_HEADER,
    PERSIST_ITEMS,
    SOURCE,
    SOURCE_MB,
    SOURCE_TMA,
    SOURCE_TMA_PERSIST,
    conditional_rescale,
    head_sections,
    own_tiles,
    snake_order,
    uniform_index,
)
from ksearch.kernels.cuda_headers import WGMMA_HEADER
from ksearch.kernels.tensor_map import TMA_HEADER, map_input


@dataclass(frozen=True)
class WsConfig:
    wg: int = 2      # consumer warpgroups per block (64 query rows each)
    bn: int = 64     # keys per K / V tile
    stages: int = 2  # K / V stages in shared memory
    pwarps: int = 1  # producer warps; 0: no producer, every thread loads (SOURCE_MB)
    cp: str = "cg"   # cp.async cache mode (wgmma.cp_cache)
    bulk: bool = False  # K / V as tile images, one bulk copy a tile (needs a producer)
    pp: bool = False    # consumer warpgroups take turns on the tensor cores (needs a producer)
    # K / V by tensor copies (needs a producer): 1 one 4-D copy a tile, 2 one per 16-byte column, 3 one per 64 columns
    # with the 128-byte swizzle
    tma: int = 0
    # Blocks an SM the launch bounds ask ptxas to leave registers for (> 1: one block's prologue and epilogue run
    # beside another's loop, as FlashAttention-2 relies on; one consumer warpgroup and a producer warp fit two)
    blocks: int = 1
    # Persistent (needs tensor copies): blocks an SM x SMs blocks walk the work items, each producer running on into
    # its block's next item (SOURCE_TMA_PERSIST)
    persist: bool = False
    # Persistent blocks only: the next item's Q loaded under this item's epilogue (Q_NEXT)
    qnext: bool = False
    # Registers a producer warpgroup keeps (setmaxnreg, a multiple of 8): 24 leave three consumer warpgroups 160 and
    # two 240; 32 leave three 160 and two 232 (consumer_registers) and keep the persistent producer loop from spilling
    preg: int = 24
    # How the epilogue stores O: 16 bytes a lane after a transpose within each quad of lanes (`_st16`,
    # wgmma.EPILOGUE), 4 bytes a lane from the accumulators (`_st4`, wgmma.EPILOGUE_STORE4), or 0: the measured
    # default, 16 (store_bytes)
    store: int = 0
    # O through shared memory (its Q rows) and one bulk copy a warpgroup (`_ob`, wgmma.EPILOGUE_BULK): correct, and
    # within 1% of the 16-byte stores over the 96 shapes, slower in most groups (docs/kernels-attention.md)
    obulk: bool = False
    # Conditional rescale (`_cr`, wgmma_ws_text.conditional_rescale): O multiplied by corr only when a row's maximum
    # grew past 2^8, at the top of a step instead of under S(t)
    crescale: bool = False
    # Q's L2 prefetch (`_qp`, needs tensor copies; wgmma_ws_text.PRODUCER_TMA): the producer asks L2 for the Q rows of
    # the item its SM runs next as it issues this item's last STAGES tiles
    qpf: bool = False
    # One pair of tensor maps a launch (`_m1`, one block an item; wgmma_ws_text.PRODUCER_TMA): a block that finds the
    # pair it would publish already in the scratch output skips its own publication
    maps1: bool = False
    # Each consumer warpgroup multiplies only the tiles its own rows need (`_wt`, needs a producer, no ping-pong;
    # wgmma_ws_text.own_tiles): under the causal mask none past its last row's diagonal, past L (a partial last block)
    # one
    own_tiles: bool = False
    # Persistent blocks only: each block's items in snake order, the rounds alternating in direction (`_sn`;
    # wgmma_ws_text.snake_order), which evens out the blocks' work under the causal mask
    snake: bool = False
    # The consumers' index arithmetic in forms ptxas keeps on the uniform datapath (`_uw`, needs a producer;
    # wgmma_ws_text.uniform_index): the warpgroup index from lane 0, a persistent block's running tile count unsigned
    uniform: bool = False
    # Persistent blocks only: the items a section of heads at a time, a section the query heads of gridDim.x / 4 K / V
    # heads (`_hs`, wgmma_ws_text.head_sections), instead of one row block of every head a round
    sections: bool = False
    # Persistent blocks only, no mask: the last round's items split along the keys, each part's rows merged by the
    # last part to finish (`_kt`, wgmma_ws_tail), so the launch does not wait on whole items in a part-filled round
    ktail: bool = False
    # Grouped rows (`_gp`, host side only, no mask): the query heads that share a K / V head are one run of Hq / Hkv x L
    # rows, contiguous in q, so q goes in as (B, Hkv, Hq / Hkv x L, D) and O comes back as (B, Hq, L, D). The same
    # kernel then cuts each K / V head's rows into fewer items: one partial item a K / V head instead of one a query
    # head (at 192 rows an item and L=4096, 86 items a K / V head of four query heads instead of 88)
    grouped: bool = False
    # Persistent blocks with the 128-byte swizzle only: Q copied by the producer with tensor copies, the consumers
    # waiting on an mbarrier (`_qt`, wgmma_ws_q_tma); on H100s within 2% of the dispatch either way (opt-in)
    qtma: bool = False
    # P's row sums by one m64n8k16 a tile on fp32 sums of its 16-key blocks (`_r1`, wgmma_ws_row_sums) instead of one
    # a 16 keys, which took 13% of the D=128 tile's time on the tensor cores alone (benchmarks/wgmma_tile_ceiling.py)
    row_sums_once: bool = False
    # P's exponentials on the rows' maxima before the tile, its own maxima beside them (`_xa`, needs `_cr` and a
    # producer, no ping-pong; wgmma_ws_ahead): a warpgroup whose rows grew past 2^8 in a tile runs that tile again
    exp_ahead: bool = False

    def threads(self) -> int:
        return 128 * self.wg + 32 * self.pwarps

    def smem_bytes(self, d: int) -> int:
        maps = 128 + 128 * (3 if self.qtma else 2) if self.tma else 0  # two tensor maps (three: Q's), 128-aligned
        align = 1024 if self.tma == 3 else 0  # the swizzled stages start at a multiple of 1024 bytes
        q_tma = 768 + 16 if self.qtma else 0  # Q at byte 1024 instead of 256; its two mbarriers
        sums = 8 * 128 * self.wg if self.exp_ahead else 0  # `_xa`: a consumer thread's saved row sums before Q
        kv_stages = 2 * self.stages * self.bn * d * 2 + 4 * self.stages * 8  # K / V stages and their mbarriers
        return 256 + sums + 64 * self.wg * d * 2 + kv_stages + maps + align + q_tma


def config_problem(cfg: WsConfig) -> str | None:
    """Why a configuration can run at no shape, in words that say what to change; None if it can run at some."""
    if (cfg.bulk or cfg.pp or cfg.tma) and cfg.pwarps == 0:  # the copies are the producer's; ping-pong is SOURCE's
        return "_bulk, _tma and _pp need a producer (_p1 .. _p4)"
    if cfg.tma not in (0, 1, 2, 3):
        return ("tma is 0 (off), 1 (_tma: one 4-D copy a tile), 2 (_tmac: one copy per 16-byte column) or 3 (_tmas: "
                "one per 64 columns, 128-byte swizzle)")
    if cfg.tma and cfg.bulk:
        return "_tma, _tmac and _tmas replace _bulk's tile images: name one of them"
    if cfg.persist and not cfg.tma:
        return "_pst (persistent blocks) takes tensor copies (_tma, _tmac or _tmas)"
    if cfg.maps1 and (not cfg.tma or cfg.persist):
        return "_m1 (one pair of tensor maps a launch) takes tensor copies and one block an item (no _pst)"
    if cfg.own_tiles and (cfg.pwarps == 0 or cfg.pp):
        return "_wt (each warpgroup its own tiles) needs a producer (_p1 .. _p4) and no ping-pong (_pp)"
    if cfg.qpf and not cfg.tma:
        return "_qp (Q prefetched into L2 by the producer) takes tensor copies (_tma, _tmac or _tmas)"
    if cfg.uniform and cfg.pwarps == 0:
        return "_uw (uniform index arithmetic) is for producer kernels (_p1 .. _p4)"
    if cfg.snake and not cfg.persist:
        return "_sn (items in snake order) is for persistent blocks (_pst)"
    if cfg.sections and (not cfg.persist or cfg.qnext or cfg.qpf):
        return "_hs (heads in sections) is for persistent blocks (_pst) without _qn or _qp"
    if cfg.ktail and (not cfg.persist or cfg.qnext or cfg.qpf or cfg.obulk or store_bytes(cfg) != 16):
        return "_kt (the last round split along the keys) is for persistent blocks (_pst) without _qn, _qp, _ob or _st4"
    if cfg.qtma and (not cfg.persist or cfg.tma != 3 or cfg.qnext or cfg.obulk):
        return ("_qt (Q by the producer's tensor copies) is for persistent blocks with the swizzled copies (_tmas, "
                "_pst), without _qn or _ob")
    if cfg.exp_ahead and (not cfg.crescale or cfg.pwarps == 0 or cfg.pp or cfg.qtma):
        return ("_xa (exponentials ahead of the maximum) needs _cr and a producer (_p1 .. _p4), without ping-pong (_pp) "
                "or Q by tensor copies (_qt)")
    if cfg.qnext and not cfg.persist:
        return "_qn (the next item's Q under this one's epilogue) is for persistent blocks (_pst)"
    if cfg.preg != 24 and (cfg.pwarps != 4 or cfg.preg % 8 or not 24 <= cfg.preg <= 64):
        return "_pregN sets a producer warpgroup's registers (_p4): N a multiple of 8 from 24 to 64"
    if cfg.pwarps == 0 and cfg.stages < 4:  # loads run two tiles ahead of the one released last
        return "without a producer (_p0) it needs 4 stages (_s4)"
    # a producer warpgroup raises the consumers to at most 240 registers: one consumer warpgroup (255 at entry) would
    # have setmaxnreg.inc lower its count, which PTX leaves undefined
    if cfg.pwarps == 4 and cfg.wg not in (2, 3):
        return "a producer warpgroup (_p4) needs 2 or 3 consumer warpgroups (ws2_ or ws3_)"
    if not 1 <= cfg.blocks <= 4:
        return "_bN asks for 1 to 4 blocks an SM"
    if cfg.store not in (0, 4, 16):
        return "_stN stores O N bytes a lane: _st4 or _st16"
    if cfg.obulk and (cfg.store or cfg.qnext):
        return "_ob copies O out of Q's rows in shared memory: not with _stN (its own stores) or _qn (Q's next rows)"
    # the register file (64 K) over the blocks' threads: under 128 a thread the consumers' accumulators spill
    if 65536 // (cfg.threads() * cfg.blocks) < 128:
        return (f"{cfg.blocks} blocks of {cfg.threads()} threads leave {65536 // (cfg.threads() * cfg.blocks)} "
                "registers a thread; two blocks an SM take one consumer warpgroup and up to 3 producer warps")
    if cfg.blocks * (cfg.smem_bytes(64) + 1024) > SM_SMEM:
        return (f"{cfg.blocks} blocks of {cfg.smem_bytes(64)} bytes (and 1 KB each the system keeps) exceed an SM's "
                f"{SM_SMEM} bytes even at D=64: fewer stages or keys a tile")
    return None


def supports(q: Any, k: Any, v: Any, causal: bool, cfg: WsConfig) -> bool:
    return _supports(tuple(q.shape), tuple(k.shape), tuple(v.shape), (q.dtype, k.dtype, v.dtype), causal, cfg)


@cache
def _supports(q_shape: tuple[int, ...], k_shape: tuple[int, ...], v_shape: tuple[int, ...], dtypes: tuple[Any, ...],
              causal: bool, cfg: WsConfig) -> bool:
    """`supports` by shapes and dtypes, once each: asked on every call, it was a fifth of a call's host time."""
    if config_problem(cfg) is not None:
        return False
    return (smem_problem(cfg, q_shape[-1]) is None
            and fits_shapes(q_shape, k_shape, v_shape, dtypes, causal, 64, cfg.bn, 0))  # partial last block


def smem_problem(cfg: WsConfig, d: int) -> str | None:
    """Why `cfg`'s shared memory cannot be had at head dimension `d` (a block's limit, or an SM's for `_bB`), or None:
    the one rule the dispatch, the GPU checks and the item trace skip a head dimension by."""
    smem = cfg.smem_bytes(d)
    if smem > MAX_SMEM:
        return f"it needs {smem} bytes of shared memory, a block may have {MAX_SMEM}"
    if cfg.blocks > 1 and cfg.blocks * (smem + 1024) > SM_SMEM:
        return f"{cfg.blocks} blocks of {smem} bytes of shared memory (and 1 KB each) exceed an SM's {SM_SMEM}"
    return None


def attention_wgmma_ws(q: Any, k: Any, v: Any, causal: bool = False, cfg: WsConfig | None = None) -> Any:
    cfg = cfg or WsConfig()
    if cfg.grouped and not causal and q.shape[1] != k.shape[1]:
        b, hq, length, d = q.shape
        rows = q.reshape(b, k.shape[1], hq // k.shape[1] * length, d)  # query head hk * G + j: rows j * L ..
        return attention_wgmma_ws(rows, k, v, False, _rows_as_given(cfg)).reshape(b, hq, length, d)
    if cfg.tma:
        return _attention_tma(q, k, v, causal, cfg)
    planned = _launch(tuple(q.shape), q.dtype, bool(causal), cfg)
    if cfg.bulk:
        k, v = tile_images(k, v)
    return launch(planned, q, k, v)


@cache
def _rows_as_given(cfg: WsConfig) -> WsConfig:
    """`cfg` without `_gp`, once a configuration (a dataclass copy a call is host time)."""
    return replace(cfg, grouped=False)


@lru_cache(maxsize=1024)
def _launch(q_shape: tuple[int, ...], dtype: Any, causal: bool, cfg: WsConfig) -> tuple[Any, dict[str, Any]]:
    """The kernel without tensor copies (bulk copies or cp.async), its template arguments as constants, and its launch,
    once per shape (cuda_prefill.shape_launch): made every call, the text, header and key were host time a call."""
    pre, _ = cp_cache(cfg.cp)
    return shape_launch(kernel_name(cfg), source_text(cfg),
                        pre + WGMMA_HEADER + BULK_HEADER + launch_bounds(cfg.threads(), cfg.blocks),
                        cfg.smem_bytes(q_shape[-1]), q_shape, dtype, 64 * cfg.wg, cfg.threads(),
                        [("WG", cfg.wg), ("BN", cfg.bn), ("CAUSAL", causal), *stage_args(cfg)])


def source_text(cfg: WsConfig) -> str:
    """The kernel text a configuration runs: persistent, tensor copies, a producer or none, and its epilogue."""
    text = ((SOURCE_TMA_PERSIST if cfg.persist else SOURCE_TMA) if cfg.tma
            else SOURCE if cfg.pwarps else SOURCE_MB)
    if cfg.crescale:
        text = conditional_rescale(text)
    if cfg.own_tiles:
        text = own_tiles(text)
    if cfg.snake:
        text = snake_order(text)
    if cfg.sections:
        text = head_sections(text)
    if cfg.ktail:
        text = key_split_tail(text, PERSIST_ITEMS)
    if cfg.qtma:
        text = q_by_tensor_copy(text)
    if cfg.uniform:
        text = uniform_index(text)
    if cfg.row_sums_once:
        text = row_sums_once(text)
    if cfg.exp_ahead:
        text = exp_ahead(text)
    if cfg.obulk:
        return text.replace(EPILOGUE, EPILOGUE_BULK)
    return text.replace(EPILOGUE, EPILOGUE_STORE4) if store_bytes(cfg) == 4 else text


def store_bytes(cfg: WsConfig) -> int:
    """Bytes a lane stores of O at a time: 16 unless `_st4` says 4. The quad transpose took the epilogue from 0.6-2.2
    to 0.3-0.7 tiles' time in every kernel (benchmarks/prefill_item_trace.py); with its shuffles outside the store's
    branch (wgmma.EPILOGUE) the persistent kernels' main loop compiles to the same instructions as with 4-byte stores,
    and over the 96 shapes they ran 2-4% faster with it (docs/kernels-attention.md)."""
    return cfg.store or 16


def store_tag(cfg: WsConfig) -> str:
    """The name part for a store width other than the kernel's default (none for the default)."""
    return "" if cfg.store in (0, store_bytes(replace(cfg, store=0))) else f"_st{cfg.store}"


def tma_geometry(k_shape: tuple[int, ...], bn: int, mode: int) -> tuple[tuple[int, ...], ...]:
    """(dims, strides in bytes, box) of the tensor map over K (or V) of shape (B, H, S, D), 2-byte elements, for a
    BN-key tile: mode 1 one 4-D copy (8 elements, S rows, D / 8 columns, B * H) and mode 2 one 3-D copy (8 elements
    of D, S rows, B * H) per column, both column-major in 16-byte columns; mode 3 one 3-D copy of 64 elements per 64
    columns, swizzled (`tma_swizzle`)."""
    b, h, s, d = k_shape
    if mode == 1:
        return (8, s, d // 8, b * h), (d * 2, 16, s * d * 2), (8, bn, d // 8, 1)
    return (d, s, b * h), (d * 2, s * d * 2), (64 if mode == 3 else 8, bn, 1)


def tma_swizzle(mode: int) -> int:
    """The map's swizzle (CUtensorMapSwizzle): 128 bytes (3) for mode 3, none otherwise."""
    return 3 if mode == 3 else 0


@cache
def tma_ready(k_shape: tuple[int, ...], bn: int, mode: int) -> bool:
    """Whether the tensor map of `tma_geometry` can be made here: a CUDA driver that encodes it, a geometry within
    its limits. Asked once per shape; the dispatch takes the bulk copies where not."""
    try:
        map_input(*tma_geometry(k_shape, bn, mode), swizzle=tma_swizzle(mode))
    except (BackendUnavailable, ValueError):
        return False
    return True


def tensor_maps(q_shape: tuple[int, ...], k_shape: tuple[int, ...], cfg: WsConfig) -> tuple[Any, ...]:
    """The map inputs of a tensor-copy launch: K's (the kernel makes V's from it), and with `_qt` Q's (64-row boxes)."""
    kmap = map_input(*tma_geometry(k_shape, cfg.bn, cfg.tma), swizzle=tma_swizzle(cfg.tma))
    return (kmap, map_input(*tma_geometry(q_shape, 64, 3), swizzle=3)) if cfg.qtma else (kmap,)


def map_slots(blocks: int, cfg: WsConfig) -> int:
    """uint64s of the `maps` scratch output: 128 bytes a published map (K's, V's; Q's with `_qt`) a block, and room
    to align the first to 128 bytes."""
    return blocks * 16 * (3 if cfg.qtma else 2) + 16


def _attention_tma(q: Any, k: Any, v: Any, causal: bool, cfg: WsConfig) -> Any:
    kern, maps, kwargs, counters = _tma_launch(tuple(q.shape), tuple(k.shape), q.dtype, causal, cfg)
    counts = [fresh_counters(counters)] if counters else []  # `_kt`: zeroed counters of this launch's own
    return kern(inputs=[q, k, v, softmax_scale(q.shape[-1]), *maps, *counts], **kwargs)[0]


@cache
def _tma_launch(q_shape: tuple[int, ...], k_shape: tuple[int, ...], dtype: Any, causal: bool,
                cfg: WsConfig) -> tuple[Any, tuple[Any, ...], dict[str, Any], int]:
    """(kernel, its tensor maps (K's, and Q's for `_qt`), the launch's other arguments, the arrival counters a `_kt`
    launch takes or 0) of the tensor-copy kernel,
    once per shape: building them (the kernel's name and header text, the map's geometry, grid and template) was most
    of a call's host time, which is what a small call costs when calls queue faster than the host makes them."""
    import mlx.core as mx

    pre, _ = cp_cache(cfg.cp)
    maps = tensor_maps(q_shape, k_shape, cfg)
    items = blocks_for(q_shape, 64 * cfg.wg)
    grid = persistent_blocks(items, cfg) if cfg.persist else None
    slots = map_slots(grid or items, cfg)
    names, counters, extra_out = extra_io(q_shape, k_shape, causal, cfg, grid or items)
    kwargs = launch_args(q_shape, dtype, 64 * cfg.wg, cfg.threads(),
                         [("WG", cfg.wg), ("BN", cfg.bn), ("CAUSAL", bool(causal)), *stage_args(cfg)],
                         extra_outputs=(((slots,), mx.uint64), *extra_out), grid_blocks=grid)
    # The template arguments go into the kernel's text: MLX would format them into every call (kernel_text).
    kern = build_kernel(kernel_name(cfg), source_text(cfg),
                        pre + WGMMA_HEADER + TMA_HEADER + launch_bounds(cfg.threads(), cfg.blocks),
                        cfg.smem_bytes(q_shape[-1]), ("tmap", *(("qmap",) if cfg.qtma else ()), *names[0]),
                        ("maps", *names[1]),
                        tuple(kwargs.pop("template")))
    return kern, maps, kwargs, counters




def stage_args(cfg: WsConfig) -> list[tuple[str, Any]]:
    """The template constants SOURCE / SOURCE_MB take beyond T, D, WG, BN and CAUSAL: the library's launch and the
    flash_wgmma template family's rendering both use this list, so neither can leave one out."""
    # tensor copies complete on the stage's mbarrier by bytes, like the bulk copies: BULK's barrier counts
    args = [("NSTAGES", cfg.stages), ("PWARPS", cfg.pwarps), ("BULK", bool(cfg.bulk or cfg.tma)), ("PP", bool(cfg.pp)),
            ("PREG", cfg.preg), ("CREG", consumer_registers(cfg))]
    return (args + ([("TMA", cfg.tma), ("QPF", cfg.qpf), ("MAPS1", cfg.maps1)] if cfg.tma else [])
            + ([("QNEXT", cfg.qnext)] if cfg.persist else []))


def launch_registers(cfg: WsConfig) -> int:
    """Registers a thread has at entry: what the launch bound leaves each of the block's threads (65536 / (threads x
    blocks an SM), in ptxas's units of 8; 168 for 384 threads, not 170)."""
    return min(255, 65536 // (cfg.threads() * cfg.blocks)) // 8 * 8


def consumer_registers(cfg: WsConfig) -> int:
    """Registers a consumer thread asks with setmaxnreg.inc once the producer warpgroup kept `cfg.preg`: what the
    block's entry registers leave, at most 240. An ask past them waits forever (the block's own registers are all that
    setmaxnreg hands around): two consumer warpgroups beside a producer keeping 32 get 232, not the 240 that 65536
    registers would leave; ptxas compiles the consumers' code to this count."""
    pool = launch_registers(cfg) * cfg.threads()
    return min(240, (pool - 128 * cfg.preg) // (128 * cfg.wg) // 8 * 8)


def with_bulk_copies(cfg: WsConfig) -> WsConfig:
    """`cfg` with bulk copies from tile images instead of tensor copies, one block an item (persistent blocks need the
    tensor copies), its producer at the 24 registers the bulk-copy kernels were measured with: where no tensor map can
    be made. The conditional rescale stays (WIDE's bulk rendering with it passes check-prefill; not timed); snake
    order goes with the persistent blocks, and each warpgroup's own tiles (`_wt`, checked with tensor copies only)
    with them, as does the uniform index arithmetic (`_uw`, checked and timed with tensor copies only), one
    row-sum product a tile (`_r1`, likewise) and P's exponentials ahead of the tile's maximum (`_xa`, likewise)."""
    return replace(cfg, tma=0, bulk=True, persist=False, qnext=False, preg=24, qpf=False, maps1=False,
                   own_tiles=False, snake=False, uniform=False, sections=False, ktail=False, qtma=False,
                   row_sums_once=False, exp_ahead=False)


def kernel_name(cfg: WsConfig) -> str:
    """The kernel's name: every knob that changes the text or its header, readable in profiles (the template
    constants are MLX's to add; `kernel_text.cuda_kernel` adds a digest of the text, which keeps kernels apart)."""
    tag = cp_cache(cfg.cp)[1]
    return (f"ks_flash_wgmma_ws_wg{cfg.wg}_n{cfg.bn}_s{cfg.stages}_p{cfg.pwarps}{tag}" + ("_bulk" if cfg.bulk else "")
            + (f"_tma{cfg.tma}" if cfg.tma else "") + ("_pp" if cfg.pp else "") + ("_pst" if cfg.persist else "")
            + ("_qn" if cfg.qnext else "") + preg_tag(cfg) + blocks_tag(cfg) + ("_ob" if cfg.obulk else "")
            + store_tag(cfg) + flags_tag(cfg, kernel=True))


def preg_tag(cfg: WsConfig) -> str:
    """The name part for a producer's registers other than 24 (none for 24)."""
    return f"_preg{cfg.preg}" if cfg.preg != 24 else ""


def blocks_tag(cfg: WsConfig) -> str:
    """The name part for blocks an SM (none for one): a header-level choice, named so that profiles tell it apart."""
    return f"_b{cfg.blocks}" if cfg.blocks > 1 else ""


@cache
def config_name(cfg: Any) -> str:
    """The name parse_config reads back: a WgmmaConfig or WsConfig as KSEARCH_WGMMA_CONFIG spells it."""
    from ksearch.kernels.attention.wgmma import WgmmaConfig

    ca = "_ca" if cfg.cp == "ca" else ""
    if isinstance(cfg, WgmmaConfig):
        return f"wg{cfg.wg}_n{cfg.bn}" + (f"_s{cfg.stages}" if cfg.stages != 2 else "") + ca
    return (f"ws{cfg.wg}_n{cfg.bn}_s{cfg.stages}_p{cfg.pwarps}" + ("_bulk" if cfg.bulk else "")
            + ("", "_tma", "_tmac", "_tmas")[cfg.tma] + ("_pst" if cfg.persist else "") + ("_qn" if cfg.qnext else "")
            + ("_pp" if cfg.pp else "") + preg_tag(cfg) + blocks_tag(cfg) + ("_ob" if cfg.obulk else "") + store_tag(cfg)
            + flags_tag(cfg) + ca)


def parse_config(name: str) -> Any:
    """"wgW_nN[_sS][_ca]" -> WgmmaConfig(W, N, S);
    "wsW_nN_sS[_pP][_bulk|_tma|_tmac|_tmas][_pst][_qn][_pp][_pregN][_bB][_ob][_st4|_st16][_cr][_qp][_m1][_wt][_sn][_hs]
    [_kt][_uw][_qt][_r1][_xa][_gp][_ca]" -> WsConfig(W, N, S, P) (P defaults to 1; the switches after the store tag are
    NAME_FLAGS's). For KSEARCH_WGMMA_CONFIG and the GPU check script; raises ValueError with the accepted forms, or
    with what to change in a configuration that can run at no shape."""
    import re

    from ksearch.kernels.attention.wgmma import WgmmaConfig

    switches = "".join(f"(?P<{tag}>_{tag})?" for tag, _, _ in NAME_FLAGS)
    m = re.fullmatch(r"(?:wg(?P<gw>\d)_n(?P<gn>\d+)(?:_s(?P<gs>\d))?|ws(?P<w>\d)_n(?P<n>\d+)_s(?P<s>\d)(?:_p(?P<p>\d))?"
                     r"(?P<bulk>_bulk)?(?P<tma>_tma[cs]?)?(?P<pst>_pst)?(?P<qn>_qn)?(?P<pp>_pp)?(?:_preg(?P<preg>\d+))?"
                     r"(?:_b(?P<b>\d))?(?P<ob>_ob)?(?:_st(?P<st>4|16))?" + switches + r")(?P<ca>_ca)?", name.strip())
    if not m:
        spelled = "".join(f"[_{tag}]" for tag, _, _ in NAME_FLAGS)
        meanings = "; ".join(f"_{tag}: {what}" for tag, _, what in NAME_FLAGS)
        raise ValueError(f"{name!r} is not a wgmma configuration: use wgW_nN[_sS][_ca] (e.g. wg3_n64, wg3_n64_s3) or "
                         f"wsW_nN_sS[_pP][_bulk|_tma|_tmac|_tmas][_pst][_qn][_pp][_pregN][_bB][_ob][_st4|_st16]{spelled}[_ca] (e.g. "
                         "ws3_n64_s4_p4_bulk; _bulk: K / V by bulk copies from tile images; _tma / _tmac / _tmas: by "
                         "tensor copies, one a tile / one per 16-byte column / one per 64 columns swizzled; _pst: "
                         "persistent blocks; _qn: their next Q loaded under the epilogue; _pregN: N registers for a "
                         "producer warpgroup; _pp: ping-pong between consumer warpgroups; _bB: launch bounds for B "
                         "blocks an SM; _ob: O out of shared memory by one bulk copy a warpgroup; _st4 / _st16: O stored 4 / 16 bytes "
                         f"a lane; {meanings}; _ca: cp.async through L1)")
    cp = "ca" if m["ca"] else "cg"
    if m["gw"]:
        return WgmmaConfig(int(m["gw"]), int(m["gn"]), int(m["gs"] or 2), cp)
    tma = {None: 0, "_tma": 1, "_tmac": 2, "_tmas": 3}[m["tma"]]
    cfg = WsConfig(int(m["w"]), int(m["n"]), int(m["s"]), int(m["p"] or 1), cp, bool(m["bulk"]), bool(m["pp"]), tma,
                   int(m["b"] or 1), persist=bool(m["pst"]), qnext=bool(m["qn"]), preg=int(m["preg"] or 24),
                   obulk=bool(m["ob"]), store=int(m["st"] or 0),
                   **{field: bool(m[tag]) for tag, field, _ in NAME_FLAGS})
    if cfg.store and cfg.store == store_bytes(replace(cfg, store=0)):  # the kernel's default, named: one spelling
        cfg = replace(cfg, store=0)
    problem = config_problem(cfg)
    if problem:
        raise ValueError(f"{name!r} can run at no shape: {problem}")
    return cfg
