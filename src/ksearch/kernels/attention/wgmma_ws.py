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

from dataclasses import dataclass
from functools import cache
from typing import Any

from ksearch.errors import BackendUnavailable
from ksearch.kernels import device
from ksearch.kernels.attention.cuda_prefill import (
    BLOCK_COORDS,
    blocks_for,
    build_kernel,
    fits_shapes,
    launch,
    launch_args,
    softmax_scale,
)
from ksearch.kernels.attention.wgmma import (
    EPILOGUE,
    MAX_SMEM,
    REGISTERS,
    ROWS_HERE,
    SETUP,
    SETUP_LAYOUT,
    SETUP_SMEM,
    SM_SMEM,
    STEPS,
    cp_cache,
    launch_bounds,
    pipeline,
)
from ksearch.kernels.cuda_headers import WGMMA_HEADER
from ksearch.kernels.tensor_map import TMA_HEADER, map_input

# mbarriers after the K / V stages: K full, K empty, V full, V empty (STAGES each). "Full" counts the PT producer
# threads' cp.async arrivals (with BULK, one arrival that expects the tile's bytes); "empty" one arrival per consumer
# warp.
WS_SPLIT_FRAME = r"""
    unsigned long long* bars = reinterpret_cast<unsigned long long*>(Vs + STAGES * KB);
    unsigned long long *kfull = bars, *kempty = bars + STAGES, *vfull = bars + 2 * STAGES, *vempty = bars + 3 * STAGES;
    if (threadIdx.x == 0) {
      for (int i = 0; i < STAGES; ++i) {
        ks_mbar_init(kfull + i, BULK ? 1 : PT); ks_mbar_init(kempty + i, NT / 32);
        ks_mbar_init(vfull + i, BULK ? 1 : PT); ks_mbar_init(vempty + i, NT / 32);
      }
    }
    __syncthreads();  // the last block-wide barrier: producer and consumers part here
    // A producer warpgroup (PWARPS = 4) gives its registers to the consumers (setmaxnreg; the launch bound gave every
    // thread 65536 / threads): it keeps PREG (24 unless a configuration's _preg says), they take what is left, up to
    // 240.
    constexpr int CREG = ((65536 - 128 * PREG) / NT / 8 * 8) > 240 ? 240 : ((65536 - 128 * PREG) / NT / 8 * 8);
    if (threadIdx.x >= NT) {  // the PT producer threads: tile t into stage t % STAGES once consumers released t - STAGES
      if (PT == 128) asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" :: "n"(PREG) : "memory");
      const int pl = threadIdx.x - NT;
{PRODUCER}      ks_wait_w<0>();
      return;
    }
    if (PT == 128) asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" :: "n"(CREG) : "memory");
    // Consumers: this warpgroup's 64 query rows, then only its own named barrier (1 + wg) from here on.
    ks_load_core<D, 128, 64>(Qs + wg * 64 * D, qg + (size_t)wg * 64 * D, max(0, min(64, rows_here - wg * 64)), wt);
    ks_commit_w();
    ks_wait_w<0>();
    ks_proxy_fence();
    asm volatile("bar.sync %0, 128;\n" :: "r"(1 + wg) : "memory");
"""

PRODUCER_COPIES = r"""      if (BULK) {  // k and v are tile images (tile_images): one bulk copy a tile, issued by one thread
        if (pl == 0) {
          for (int t = 0; t < ntiles; ++t) {
            const int st = t % STAGES, ph = (t / STAGES) & 1;
            if (t >= STAGES) ks_mbar_wait(kempty + st, ph ^ 1);
            ks_bulk_load(Ks + st * KB, kg + (size_t)t * KB, KB * 2, kfull + st);
            if (t >= STAGES) ks_mbar_wait(vempty + st, ph ^ 1);
            ks_bulk_load(Vs + st * KB, vg + (size_t)t * KB, KB * 2, vfull + st);
          }
        }
      } else {
        for (int t = 0; t < ntiles; ++t) {
          const int st = t % STAGES, ph = (t / STAGES) & 1;
          if (t >= STAGES) ks_mbar_wait(kempty + st, ph ^ 1);
          ks_load_core<D, PT, BN>(Ks + st * KB, kg + (size_t)t * BN * D, BN, pl);
          ks_cp_mbar_arrive(kfull + st);
          if (t >= STAGES) ks_mbar_wait(vempty + st, ph ^ 1);
          ks_load_core<D, PT, BN>(Vs + st * KB, vg + (size_t)t * BN * D, BN, pl);
          ks_cp_mbar_arrive(vfull + st);
        }
      }
"""

# Tensor copies (TMA) through the host's map (input tmap, kernels/tensor_map.py): producer warp 0 sets K's and V's
# global address in a copy of it, publishes both to this block's slot of the scratch output `maps` and fences them;
# then one thread issues, per tile, one copy (TMA 1: a 4-D box of 8 elements x BN rows x D / 8 columns), one per
# 16-byte column (TMA 2: 3-D boxes of 8 x BN) - either way the tile lands column-major in 16-byte columns (KV_LAYOUT
# 1) - or one per 64 columns with the 128-byte swizzle (TMA 3: boxes of 64 x BN; KV_LAYOUT 2).
PRODUCER_TMA = r"""      if (pl < 32) {
        unsigned long long* smap = reinterpret_cast<unsigned long long*>(
            (reinterpret_cast<size_t>(bars + 4 * STAGES) + 127) & ~(size_t)127);
        unsigned long long* gmap = reinterpret_cast<unsigned long long*>(
            (reinterpret_cast<size_t>(maps) + 127) & ~(size_t)127) + ((size_t)blockIdx.y * gridDim.x + blockIdx.x) * 32;
        if (lane < 16) { smap[lane] = tmap[lane]; smap[16 + lane] = tmap[lane]; }
        __syncwarp();
        if (lane == 0) { ks_tmap_address(smap, k); ks_tmap_address(smap + 16, v); }
        __syncwarp();
        ks_tmap_publish(gmap, smap);
        ks_tmap_publish(gmap + 16, smap + 16);
        if (lane == 0) {
          ks_tmap_acquire(gmap);
          ks_tmap_acquire(gmap + 16);
          const int bh = b * Hkv + hk;
          auto copy = [&](T* dst, const unsigned long long* map, int t, unsigned long long* bar) {
            ks_mbar_expect(bar, KB * 2);
            if (TMA == 1) {
              ks_tma_load4(ks_saddr(dst), map, 0, t * BN, 0, bh, bar);
            } else {
              constexpr int COLS = TMA == 3 ? 64 : 8;  // columns a box
              #pragma unroll
              for (int c = 0; c < D / COLS; ++c)
                ks_tma_load3(ks_saddr(dst) + c * BN * COLS * 2, map, c * COLS, t * BN, bh, bar);
            }
          };
          for (int t = 0; t < ntiles; ++t) {
            const int st = t % STAGES, ph = (t / STAGES) & 1;
            if (t >= STAGES) ks_mbar_wait(kempty + st, ph ^ 1);
            copy(Ks + st * KB, gmap, t, kfull + st);
            if (t >= STAGES) ks_mbar_wait(vempty + st, ph ^ 1);
            copy(Vs + st * KB, gmap + 16, t, vfull + st);
          }
        }
      }
"""
WS_SPLIT = WS_SPLIT_FRAME.replace("{PRODUCER}", PRODUCER_COPIES)

# Bulk copies (sm_90): global -> shared without a tensor map, completion counted in bytes on an mbarrier. (Tensor
# copies through a map, PRODUCER_TMA, were slower with the no-swizzle layout's 16-byte boxes; see
# docs/kernels-attention.md.)
# A plain bulk copy moves contiguous bytes, so K and V go in as tile images (tile_images), each tile's bytes already in
# the core-matrix order that the wgmma descriptors read.
BULK_HEADER = r"""
#ifndef KS_BULK_HEADER
#define KS_BULK_HEADER
__device__ __forceinline__ void ks_bulk_load(void* smem, const void* g, unsigned bytes, unsigned long long* bar) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" :: "r"(ks_saddr(bar)), "r"(bytes) : "memory");
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n"
               :: "r"(ks_saddr(smem)), "l"(g), "r"(bytes), "r"(ks_saddr(bar)) : "memory");
}
#endif
"""

WS_HANDOVER = r"""
    // Waiting on a "full" mbarrier, then a proxy fence: the producer's cp.async writes (generic proxy) become
    // visible to this warpgroup's wgmma reads (async proxy). Bulk copies write through the async proxy already.
    auto wait_full = [&](unsigned long long* bar, int t) {
      ks_mbar_wait(bar + t % STAGES, (t / STAGES) & 1);
      if (!BULK) ks_proxy_fence();
    };
    auto release = [&](unsigned long long* bar, int t) {  // one arrival per warp, after its wgmma wait
      if (lane == 0) ks_mbar_arrive(bar + t % STAGES);
    };
    // PP (ping-pong, FA-3's warp scheduling): the consumer warpgroups take turns on the tensor cores. Warpgroup w
    // waits on named barrier 8 + w before issuing its products and, once they are issued, lets the next one go
    // (bar.arrive on 8 + (w + 1) % WG, 256 threads: 128 waiting, 128 arriving), so one warpgroup's softmax runs
    // while the next one's products are on the tensor cores. The last warpgroup lets the first start; the first
    // takes one more turn at the end so that every arrival is consumed.
    auto pp_sync = [&]() { if (PP) asm volatile("bar.sync %0, 256;\n" :: "r"(8 + wg) : "memory"); };
    auto pp_arrive = [&]() { if (PP) asm volatile("bar.arrive %0, 256;\n" :: "r"(8 + (wg + 1) % WG) : "memory"); };
    if (PP && wg == WG - 1) pp_arrive();
"""


# Without a producer (pwarps=0): every thread loads its share of tile t + 2 at step t and arrives on that stage's
# "full" mbarrier through cp.async.mbarrier.arrive (so the barrier completes once all of the tile has landed); each
# warp arrives on the "empty" one after its O += P V of the tile. No __syncthreads: a warpgroup can run up to a step
# ahead of the others, so one's softmax can meet another's products (4 stages: loads two tiles ahead).
MB_SPLIT = r"""
    unsigned long long* bars = reinterpret_cast<unsigned long long*>(Vs + STAGES * KB);
    unsigned long long *full = bars, *empty = bars + STAGES;
    if (threadIdx.x == 0) {
      for (int i = 0; i < STAGES; ++i) { ks_mbar_init(full + i, NT); ks_mbar_init(empty + i, NT / 32); }
    }
    __syncthreads();  // barriers initialised; the only block-wide barrier
    auto load_tile = [&](int t) {  // this thread's share of K(t), V(t); the arrival also covers its earlier copies
      const int st = t % STAGES;
      if (t >= STAGES) ks_mbar_wait(empty + st, ((t - STAGES) / STAGES) & 1);
      ks_load_core<D, NT, BN>(Ks + st * KB, kg + (size_t)t * BN * D, BN, threadIdx.x);
      ks_load_core<D, NT, BN>(Vs + st * KB, vg + (size_t)t * BN * D, BN, threadIdx.x);
      ks_cp_mbar_arrive(full + st);
    };
    ks_load_core<D, NT, BM>(Qs, qg, rows_here, threadIdx.x);  // covered by tile 0's arrival
    load_tile(0);
    if (ntiles > 1) load_tile(1);
"""

MB_HANDOVER = r"""
    auto wait_full = [&](int t) {  // then a proxy fence: other threads' cp.async writes, visible to wgmma reads
      ks_mbar_wait(full + t % STAGES, (t / STAGES) & 1);
      ks_proxy_fence();
    };
"""


SOURCE_MB = ("    constexpr int STAGES = NSTAGES;\n    constexpr int KV_LAYOUT = 0;"
             + SETUP + MB_SPLIT + REGISTERS + STEPS + MB_HANDOVER
             + pipeline(first="if (ntiles > 2) load_tile(2);\nwait_full(0);",
                        step="if (t + 2 < ntiles) load_tile(t + 2);  // waits for every warp's O += P(t-2) V(t-2)\n"
                             "wait_full(t);",
                        after_pv="if (lane == 0) ks_mbar_arrive(empty + (t - 1) % STAGES);  // done with tile t - 1",
                        last="", end="ks_wait_w<0>();") + EPILOGUE)


def _producer_source(split: str, kv_layout: str) -> str:
    """The producer kernel with `split` (its set-up and producer branch); kv_layout: SETUP's KV_LAYOUT (an
    expression of the template constants)."""
    return (f"    constexpr int STAGES = NSTAGES, PT = 32 * PWARPS;\n    constexpr int KV_LAYOUT = {kv_layout};"
            + SETUP + split + REGISTERS + STEPS + WS_HANDOVER
            + pipeline(first="wait_full(kfull, 0);\npp_sync();", after_s0="release(kempty, 0);",
                       step="wait_full(kfull, t);\nwait_full(vfull, t - 1);\npp_sync();", after_s="release(kempty, t);",
                       after_pv="release(vempty, t - 1);", last="wait_full(vfull, ntiles - 1);\npp_sync();",
                       issued="pp_arrive();", end="if (PP && wg == 0) pp_sync();") + EPILOGUE)


SOURCE = _producer_source(WS_SPLIT, "0")
# Takes input `tmap` and output `maps` besides q, k, v, scale and o, and template constant TMA (1, 2 or 3).
SOURCE_TMA = _producer_source(WS_SPLIT_FRAME.replace("{PRODUCER}", PRODUCER_TMA), "TMA == 3 ? 2 : 1")



def _swap(text: str, old: str, new: str, count: int = 1) -> str:
    """`text` with `old` replaced by `new`, checked to occur `count` times: a piece of kernel text that moved makes the
    persistent kernel's construction fail at import, not its launch on a GPU."""
    if text.count(old) != count:
        raise RuntimeError(f"persistent prefill: {old[:60]!r} occurs {text.count(old)} times, expected {count}")
    return text.replace(old, new)


# Persistent (`_pst`, tensor copies only): one block a multiprocessor (blocks an SM x SMs in all) walks the work items
# (BM query rows of one batch and query head) item = blockIdx.x, + gridDim.x, ..., every head's longest causal rows
# first. Its producer runs on into the next item's K / V while the consumers store the last item's O and load their
# next Q, so a block's start (maps published once, barriers, the first tiles in flight) and its end overlap the
# neighbouring items instead of costing each block on its own (FlashAttention-3's persistent schedule without its
# tile scheduler). Stages and phases follow a running count of the block's tiles, g0 + t.
ITEM_COORDS = _swap(BLOCK_COORDS,
                    "const int mt = gridDim.x - 1 - blockIdx.x;  // longest causal tiles first\n"
                    "    const int bhq = blockIdx.y,",
                    "const int mt = MT - 1 - item / BH;  // every head's longest causal tiles first\n"
                    "    const int bhq = item % BH,")
PERSIST_ITEMS = "\n    const int MT = (q_shape[2] + BM - 1) / BM, BH = q_shape[0] * q_shape[1], ITEMS = MT * BH;\n"
_TMA_LOOP = PRODUCER_TMA[PRODUCER_TMA.index("          for (int t = 0; t < ntiles; ++t) {"):]
PRODUCER_TMA_PERSIST = _swap(_swap(_swap(_swap(
    PRODUCER_TMA, "((size_t)blockIdx.y * gridDim.x + blockIdx.x) * 32;", "(size_t)blockIdx.x * 32;"),
    "          const int bh = b * Hkv + hk;\n", ""),
    "int t, unsigned long long* bar) {", "int t, int bh, unsigned long long* bar) {"),
    _TMA_LOOP, r"""          int g0 = 0;
          for (int item = blockIdx.x; item < ITEMS; item += gridDim.x) {""" + ITEM_COORDS + r"""
          const int bh = b * Hkv + hk;
          for (int t = 0; t < ntiles; ++t) {
            const int gt = g0 + t, st = gt % STAGES, ph = (gt / STAGES) & 1;
            if (gt >= STAGES) ks_mbar_wait(kempty + st, ph ^ 1);
            copy(Ks + st * KB, gmap, t, bh, kfull + st);
            if (gt >= STAGES) ks_mbar_wait(vempty + st, ph ^ 1);
            copy(Vs + st * KB, gmap + 16, t, bh, vfull + st);
          }
          g0 += ntiles;
          }
        }
      }
""")
# QNEXT (`_qn`): once its last product is done, a consumer warpgroup loads its rows of the next item's Q, so the load
# runs under this item's epilogue (FlashAttention-3's order) instead of before the next item's first product; every S
# product of this item has completed (no wgmma reads Q any more), and each warpgroup loads and reads only its own rows.
Q_NEXT = r"""
if (QNEXT && item + (int)gridDim.x < ITEMS) {
  const int nx = item + gridDim.x, nm0 = (MT - 1 - nx / BH) * BM;
  ks_load_core<D, 128, 64>(Qs + wg * 64 * D, q + ((size_t)(nx % BH) * L + nm0 + wg * 64) * D,
                           max(0, min(64, min(BM, L - nm0) - wg * 64)), wt);
  ks_commit_w();
}"""
_CONSUMER_START = '    if (PT == 128) asm volatile("setmaxnreg.inc'
_FRAME_PERSIST = WS_SPLIT_FRAME[:WS_SPLIT_FRAME.index(_CONSUMER_START)].replace("{PRODUCER}", PRODUCER_TMA_PERSIST)
_Q_LOAD = WS_SPLIT_FRAME[WS_SPLIT_FRAME.index(_CONSUMER_START):]
_STEPS_RUNNING = _swap(STEPS, "((t % STAGES) * KB", "(((g0 + t) % STAGES) * KB", 2)
_HANDOVER_RUNNING = _swap(_swap(WS_HANDOVER, "bar + t % STAGES, (t / STAGES) & 1",
                                "bar + (g0 + t) % STAGES, ((g0 + t) / STAGES) & 1"),
                          "ks_mbar_arrive(bar + t % STAGES)", "ks_mbar_arrive(bar + (g0 + t) % STAGES)")
SOURCE_TMA_PERSIST = (
    "    constexpr int STAGES = NSTAGES, PT = 32 * PWARPS;\n    constexpr int KV_LAYOUT = TMA == 3 ? 2 : 1;"
    + SETUP_SMEM + SETUP_LAYOUT + PERSIST_ITEMS + _FRAME_PERSIST
    + _Q_LOAD[:_Q_LOAD.index("\n") + 1]  # the consumers' setmaxnreg, once
    + "    int g0 = 0;  // K / V tiles this block consumed before this item\n"
    + "    for (int item = blockIdx.x; item < ITEMS; item += gridDim.x) {" + ITEM_COORDS + ROWS_HERE
    + _swap(_swap(_Q_LOAD[_Q_LOAD.index("\n") + 1:], "    ks_load_core<D, 128, 64>",
                  "    if (!QNEXT || item == blockIdx.x)\n      ks_load_core<D, 128, 64>"),
            "    ks_commit_w();\n", "    if (!QNEXT || item == blockIdx.x) ks_commit_w();\n")
    + REGISTERS + _STEPS_RUNNING + _HANDOVER_RUNNING
    + pipeline(first="wait_full(kfull, 0);", after_s0="release(kempty, 0);",
               step="wait_full(kfull, t);\nwait_full(vfull, t - 1);", after_s="release(kempty, t);",
               after_pv="release(vempty, t - 1);", last="wait_full(vfull, ntiles - 1);",
               end="release(vempty, ntiles - 1);  // the next item's tiles reuse the stage" + Q_NEXT)
    + EPILOGUE + "    g0 += ntiles;\n    }\n")

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
    # two 240; 32 leave them the same and keep the persistent kernel's producer loop from spilling (ptxas)
    preg: int = 24

    def threads(self) -> int:
        return 128 * self.wg + 32 * self.pwarps

    def smem_bytes(self, d: int) -> int:
        maps = 128 + 256 if self.tma else 0  # two tensor maps, 128-byte aligned
        align = 1024 if self.tma == 3 else 0  # the swizzled stages start at a multiple of 1024 bytes
        return 256 + (64 * self.wg + 2 * self.stages * self.bn) * d * 2 + 4 * self.stages * 8 + maps + align


def config_problem(cfg: WsConfig) -> str | None:
    """Why a configuration can run at no shape, in words that say what to change; None if it can run at some."""
    if (cfg.bulk or cfg.pp or cfg.tma) and cfg.pwarps == 0:  # the copies are the producer's; ping-pong is SOURCE's
        return "_bulk, _tma and _pp need a producer (_p1 .. _p4)"
    if cfg.tma not in (0, 1, 2, 3):
        return ("tma is 0 (off), 1 (_tma: one 4-D copy a tile), 2 (_tmac: one copy per 16-byte column) or 3 (_tmas: "
                "one per 64 columns, 128-byte swizzle)")
    if cfg.tma and cfg.bulk:
        return "_tma, _tmac and _tmas replace _bulk's tile images: name one of them"
    if cfg.persist and (not cfg.tma or cfg.pp):
        return "_pst (persistent blocks) takes tensor copies (_tma, _tmac or _tmas) and no _pp"
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
    smem = cfg.smem_bytes(q_shape[-1])
    return (smem <= MAX_SMEM and (cfg.blocks == 1 or cfg.blocks * (smem + 1024) <= SM_SMEM)
            and fits_shapes(q_shape, k_shape, v_shape, dtypes, causal, 64, cfg.bn, 0))  # partial last block


# Tile images of K and V in one launch: thread j writes 16-byte chunk j of the image (core matrix j / 8, row j % 8 of
# it), so a warp writes 512 contiguous bytes and reads 8 rows x 64 contiguous bytes: whole 32-byte sectors both ways.
# (MLX's own transpose copy of one array ran at 1.8-1.9 TB/s of traffic on the H200, and took two launches.)
IMAGE_SOURCE = r"""
    constexpr int CPR = D / 8;  // 16-byte chunks a row
    const size_t j = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    const size_t n = (size_t)k_shape[0] * k_shape[1] * k_shape[2] * CPR;
    if (j >= n) return;
    const size_t rest = j >> 3, c = rest % CPR, src = ((rest / CPR) * 8 + (j & 7)) * CPR + c;
    reinterpret_cast<uint4*>(ki)[j] = reinterpret_cast<const uint4*>(k)[src];
    reinterpret_cast<uint4*>(vi)[j] = reinterpret_cast<const uint4*>(v)[src];
"""


IMAGE_THREADS = 256  # a block of the image kernel: one 16-byte chunk a thread


@cache
def _image_kernel() -> Any:
    import mlx.core as mx

    return mx.fast.cuda_kernel(name="ks_tile_image", input_names=["k", "v"], output_names=["ki", "vi"],
                               source=IMAGE_SOURCE)


def tile_images(k: Any, v: Any) -> tuple[Any, Any]:
    """K and V (B, H, S, D), S a multiple of 8, -> arrays of the same shape with each 8-row block stored as its D / 8
    core matrices (8 rows x 16 bytes each, ks_core's order): a tile of BN rows is then BN * D contiguous elements,
    the shared-memory image that ks_load_core builds, for one bulk copy. `tile_image` is the same in MLX ops."""
    n = k.size // 8
    ki, vi = _image_kernel()(inputs=[k, v], template=[("D", k.shape[-1])], grid=(n, 1, 1),
                             threadgroup=(IMAGE_THREADS, 1, 1), output_shapes=[k.shape, v.shape],
                             output_dtypes=[k.dtype, v.dtype])
    return ki, vi


def tile_image(x: Any) -> Any:
    """The reference for tile_images, in MLX ops (one transpose copy); runs on any backend."""
    b, h, s, d = x.shape
    return x.reshape(b, h, s // 8, 8, d // 8, 8).transpose(0, 1, 2, 4, 3, 5).reshape(b, h, s, d)


def attention_wgmma_ws(q: Any, k: Any, v: Any, causal: bool = False, cfg: WsConfig | None = None) -> Any:
    cfg = cfg or WsConfig()
    if cfg.tma:
        return _attention_tma(q, k, v, causal, cfg)
    pre, tag = cp_cache(cfg.cp)
    kern = build_kernel(f"ks_flash_wgmma_ws_wg{cfg.wg}_n{cfg.bn}_s{cfg.stages}_p{cfg.pwarps}{tag}"
                        + ("_bulk" if cfg.bulk else "") + ("_pp" if cfg.pp else "") + preg_tag(cfg) + blocks_tag(cfg),
                        SOURCE if cfg.pwarps else SOURCE_MB,
                        pre + WGMMA_HEADER + BULK_HEADER + launch_bounds(cfg.threads(), cfg.blocks),
                        cfg.smem_bytes(q.shape[-1]))
    if cfg.bulk:
        k, v = tile_images(k, v)
    return launch(kern, q, k, v, 64 * cfg.wg, cfg.threads(),
                  [("WG", cfg.wg), ("BN", cfg.bn), ("CAUSAL", bool(causal)), *stage_args(cfg)])


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


def _attention_tma(q: Any, k: Any, v: Any, causal: bool, cfg: WsConfig) -> Any:
    kern, tmap, kwargs = _tma_launch(tuple(q.shape), tuple(k.shape), q.dtype, causal, cfg)
    return kern(inputs=[q, k, v, softmax_scale(q.shape[-1]), tmap], **kwargs)[0]


@cache
def _tma_launch(q_shape: tuple[int, ...], k_shape: tuple[int, ...], dtype: Any, causal: bool,
                cfg: WsConfig) -> tuple[Any, Any, dict[str, Any]]:
    """(kernel, tensor map, the launch's other arguments) of the tensor-copy kernel, once per shape: building them
    (the kernel's name and header text, the map's geometry, grid and template) was most of a call's host time, which
    is what a small call costs when calls queue faster than the host makes them."""
    import mlx.core as mx

    pre, tag = cp_cache(cfg.cp)
    kern = build_kernel(f"ks_flash_wgmma_ws_wg{cfg.wg}_n{cfg.bn}_s{cfg.stages}_p{cfg.pwarps}{tag}_tma{cfg.tma}"
                        + ("_pp" if cfg.pp else "") + ("_pst" if cfg.persist else "") + ("_qn" if cfg.qnext else "")
                        + preg_tag(cfg) + blocks_tag(cfg),
                        SOURCE_TMA_PERSIST if cfg.persist else SOURCE_TMA,
                        pre + WGMMA_HEADER + TMA_HEADER + launch_bounds(cfg.threads(), cfg.blocks),
                        cfg.smem_bytes(q_shape[-1]), ("tmap",), ("maps",))
    tmap = map_input(*tma_geometry(k_shape, cfg.bn, cfg.tma), swizzle=tma_swizzle(cfg.tma))
    items = blocks_for(q_shape, 64 * cfg.wg)
    grid = persistent_blocks(items, cfg) if cfg.persist else None
    slots = (grid or items) * 32 + 16  # 256 bytes a block, and room to align the first to 128
    kwargs = launch_args(q_shape, dtype, 64 * cfg.wg, cfg.threads(),
                         [("WG", cfg.wg), ("BN", cfg.bn), ("CAUSAL", bool(causal)), *stage_args(cfg)],
                         extra_outputs=(((slots,), mx.uint64),), grid_blocks=grid)
    return kern, tmap, kwargs


def persistent_blocks(items: int, cfg: WsConfig) -> int:
    """The persistent kernel's grid: `cfg.blocks` blocks a multiprocessor, never more blocks than work items."""
    return min(items, device.cuda_sm_count() * cfg.blocks)


def stage_args(cfg: WsConfig) -> list[tuple[str, Any]]:
    """The template constants SOURCE / SOURCE_MB take beyond T, D, WG, BN and CAUSAL: the library's launch and the
    flash_wgmma template family's rendering both use this list, so neither can leave one out."""
    # tensor copies complete on the stage's mbarrier by bytes, like the bulk copies: BULK's barrier counts
    args = [("NSTAGES", cfg.stages), ("PWARPS", cfg.pwarps), ("BULK", bool(cfg.bulk or cfg.tma)), ("PP", bool(cfg.pp)),
            ("PREG", cfg.preg)]
    return args + ([("TMA", cfg.tma)] if cfg.tma else []) + ([("QNEXT", cfg.qnext)] if cfg.persist else [])


def preg_tag(cfg: WsConfig) -> str:
    """The name part for a producer's registers other than 24 (none for 24)."""
    return f"_preg{cfg.preg}" if cfg.preg != 24 else ""


def blocks_tag(cfg: WsConfig) -> str:
    """The name part for blocks an SM (none for one): MLX keys a compiled kernel by name, not by its header."""
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
            + ("_pp" if cfg.pp else "") + preg_tag(cfg) + blocks_tag(cfg) + ca)


def parse_config(name: str) -> Any:
    """"wgW_nN[_sS][_ca]" -> WgmmaConfig(W, N, S);
    "wsW_nN_sS[_pP][_bulk|_tma|_tmac|_tmas][_pst][_qn][_pp][_pregN][_bB][_ca]" -> WsConfig(W, N, S, P) (P defaults to
    1). For KSEARCH_WGMMA_CONFIG and the GPU check script; raises ValueError with the accepted forms, or with what to
    change in a configuration that can run at no shape."""
    import re

    from ksearch.kernels.attention.wgmma import WgmmaConfig

    m = re.fullmatch(r"(?:wg(\d)_n(\d+)(?:_s(\d))?|ws(\d)_n(\d+)_s(\d)(?:_p(\d))?(_bulk)?(_tma[cs]?)?(_pst)?(_qn)?"
                     r"(_pp)?(?:_preg(\d+))?(?:_b(\d))?)(_ca)?", name.strip())
    if not m:
        raise ValueError(f"{name!r} is not a wgmma configuration: use wgW_nN[_sS][_ca] (e.g. wg3_n64, wg3_n64_s3) or "
                         "wsW_nN_sS[_pP][_bulk|_tma|_tmac|_tmas][_pst][_qn][_pp][_pregN][_bB][_ca] (e.g. "
                         "ws3_n64_s4_p4_bulk; _bulk: K / V by bulk copies from tile images; _tma / _tmac / _tmas: by "
                         "tensor copies, one a tile / one per 16-byte column / one per 64 columns swizzled; _pst: "
                         "persistent blocks; _qn: their next Q loaded under the epilogue; _pregN: N registers for a "
                         "producer warpgroup; _pp: ping-pong between consumer warpgroups; _bB: launch bounds for B "
                         "blocks an SM; _ca: cp.async through L1)")
    cp = "ca" if m[15] else "cg"
    if m[1]:
        return WgmmaConfig(int(m[1]), int(m[2]), int(m[3] or 2), cp)
    tma = {None: 0, "_tma": 1, "_tmac": 2, "_tmas": 3}[m[9]]
    cfg = WsConfig(int(m[4]), int(m[5]), int(m[6]), int(m[7] or 1), cp, bool(m[8]), bool(m[12]), tma, int(m[14] or 1),
                   persist=bool(m[10]), qnext=bool(m[11]), preg=int(m[13] or 24))
    problem = config_problem(cfg)
    if problem:
        raise ValueError(f"{name!r} can run at no shape: {problem}")
    return cfg
