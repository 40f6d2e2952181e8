"""The kernel text of the warp-specialised wgmma prefill (wgmma_ws.py runs it): the producer / consumer split with
mbarriers, the producers (cp.async, bulk copies of tile images, tensor copies through a map), the hand-over between
them, the variant without a producer, and the persistent kernel whose blocks walk the work items. The steps
(products, softmax) and the block's set-up are wgmma.py's; design and numbers in wgmma_ws.py and
docs/kernels-attention.md."""

from __future__ import annotations

from ksearch.kernels.attention.cuda_prefill import BLOCK_COORDS
from ksearch.kernels.attention.wgmma import (
    EPILOGUE,
    REGISTERS,
    ROWS_HERE,
    SETUP,
    SETUP_LAYOUT,
    SETUP_SMEM,
    STEPS,
    pipeline,
)

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
    // A producer warpgroup (PWARPS = 4) gives its registers to the consumers (setmaxnreg): it keeps PREG, they take
    // CREG, both set on the host (wgmma_ws.consumer_registers) within the registers the block was launched with.
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
# QPF (`_qp`): as the producer issues the copies of an item's last STAGES tiles, its thread asks L2 for the Q rows of
# the item this SM runs next (one bulk prefetch, cp.async.bulk.prefetch.L2): with one block an item the block one wave
# on, SM-count blocks later in launch order (a guess: blocks take SMs as they free up); persistent, the block's next
# item. The consumers' Q load then reads L2 instead of HBM, the wait for Q at an item's start being 2.6 tiles' time
# with one block an item and 1.2 persistent at D=128 (prefill_item_trace.py).
def _prefetch_q(bhq: str, m0: str) -> str:
    """The bulk prefetch into L2 of the Q rows (up to BM) of the item at query head `bhq`, first row `m0`."""
    return (f'{{ const int pm0 = {m0}; asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;\\n" :: '
            f'"l"(q + ((size_t)({bhq}) * L + pm0) * D), "r"((unsigned)(min(BM, L - pm0) * D * (int)sizeof(T))) : '
            '"memory"); }')


PRODUCER_TMA = r"""      if (pl < 32) {
        unsigned long long* smap = reinterpret_cast<unsigned long long*>(
            (reinterpret_cast<size_t>(bars + 4 * STAGES) + 127) & ~(size_t)127);
        unsigned long long* gmap = reinterpret_cast<unsigned long long*>(
            (reinterpret_cast<size_t>(maps) + 127) & ~(size_t)127) + ((size_t)blockIdx.y * gridDim.x + blockIdx.x) * 32;
        // MAPS1: one pair of maps a launch, at the scratch's start. Each block builds the pair in shared memory and
        // compares it with what the scratch holds, a word a lane: where an earlier block (or a call before, on the
        // same arrays) published the same pair, it skips the publication and its release fence. Blocks that publish
        // together write the same bytes; whatever else the scratch holds differs from the pair and is overwritten.
        if (MAPS1) gmap = reinterpret_cast<unsigned long long*>((reinterpret_cast<size_t>(maps) + 127) & ~(size_t)127);
        if (lane < 16) { smap[lane] = tmap[lane]; smap[16 + lane] = tmap[lane]; }
        __syncwarp();
        if (lane == 0) { ks_tmap_address(smap, k); ks_tmap_address(smap + 16, v); }
        __syncwarp();
        bool published = false;
        if (MAPS1) {
          unsigned long long held;
          asm volatile("ld.relaxed.gpu.global.u64 %0, [%1];\n" : "=l"(held) : "l"(gmap + lane) : "memory");
          published = __all_sync(0xffffffffu, held == smap[lane]);
        }
        if (!published) {
          ks_tmap_publish(gmap, smap);
          ks_tmap_publish(gmap + 16, smap + 16);
        }
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
            if (QPF && t == max(0, ntiles - STAGES)) {  // the block one wave on: SM-count blocks later in launch order
              unsigned nsm;
              asm("mov.u32 %0, %%nsmid;" : "=r"(nsm));
              const int nb = (int)(blockIdx.y * gridDim.x + blockIdx.x + nsm);
              if (nb < (int)(gridDim.x * gridDim.y))
                """ + _prefetch_q("nb / (int)gridDim.x", "((int)gridDim.x - 1 - nb % (int)gridDim.x) * BM") + r"""
            }
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



def swap_once(text: str, old: str, new: str, count: int = 1, what: str = "prefill kernel text") -> str:
    """`text` with `old` replaced by `new`, checked to occur `count` times: a piece of kernel text that moved makes the
    kernel's construction fail at import (or on first use), not its launch on a GPU. `what` names the option."""
    if text.count(old) != count:
        raise RuntimeError(f"{what}: {old[:60]!r} occurs {text.count(old)} times in the kernel text, not {count}")
    return text.replace(old, new)


_swap = swap_once  # this module's own replacements


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
            if (QPF && t == max(0, ntiles - STAGES) && item + (int)gridDim.x < ITEMS) {  // this block's next item
              const int nx = item + (int)gridDim.x;
              """ + _prefetch_q("nx % BH", "(MT - 1 - nx / BH) * BM") + r"""
            }
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
# Ping-pong (`_pp`) across items: the last warpgroup's turn that ends one item hands the first warpgroup the next
# item's first turn, so the last warpgroup's opening arrival comes once a block, and the first warpgroup takes the
# block's one remaining arrival after its last item. Opening and closing every item instead would let the last
# warpgroup, done with an item, arrive twice on the first warpgroup's barrier before that one's closing wait: 256
# arrivals from one side complete a barrier of 256 without the other.
_HANDOVER_RUNNING = _swap(_swap(_swap(WS_HANDOVER, "bar + t % STAGES, (t / STAGES) & 1",
                                      "bar + (g0 + t) % STAGES, ((g0 + t) / STAGES) & 1"),
                                "ks_mbar_arrive(bar + t % STAGES)", "ks_mbar_arrive(bar + (g0 + t) % STAGES)"),
                          "if (PP && wg == WG - 1) pp_arrive();",
                          "if (PP && wg == WG - 1 && item == (int)blockIdx.x) pp_arrive();")
# The consumers' running tile count and the end of their item loop: anchors for the options that add to that loop
CONSUMER_COUNT = "    int g0 = 0;  // K / V tiles this block consumed before this item\n"
CONSUMER_ITEM_END = "    g0 += ntiles;\n    }\n"
PP_LAST_TURN = '    if (PP && wg == 0) asm volatile("bar.sync %0, 256;\\n" :: "r"(8) : "memory");\n'

SOURCE_TMA_PERSIST = (
    "    constexpr int STAGES = NSTAGES, PT = 32 * PWARPS;\n    constexpr int KV_LAYOUT = TMA == 3 ? 2 : 1;"
    + SETUP_SMEM + SETUP_LAYOUT + PERSIST_ITEMS + _FRAME_PERSIST
    + _Q_LOAD[:_Q_LOAD.index("\n") + 1]  # the consumers' setmaxnreg, once
    + CONSUMER_COUNT
    + "    for (int item = blockIdx.x; item < ITEMS; item += gridDim.x) {" + ITEM_COORDS + ROWS_HERE
    + _swap(_swap(_Q_LOAD[_Q_LOAD.index("\n") + 1:], "    ks_load_core<D, 128, 64>",
                  "    if (!QNEXT || item == blockIdx.x)\n      ks_load_core<D, 128, 64>"),
            "    ks_commit_w();\n", "    if (!QNEXT || item == blockIdx.x) ks_commit_w();\n")
    + REGISTERS + _STEPS_RUNNING + _HANDOVER_RUNNING
    + pipeline(first="wait_full(kfull, 0);\npp_sync();", after_s0="release(kempty, 0);",
               step="wait_full(kfull, t);\nwait_full(vfull, t - 1);\npp_sync();", after_s="release(kempty, t);",
               after_pv="release(vempty, t - 1);", last="wait_full(vfull, ntiles - 1);\npp_sync();",
               issued="pp_arrive();",
               end="release(vempty, ntiles - 1);  // the next item's tiles reuse the stage" + Q_NEXT)
    + EPILOGUE + CONSUMER_ITEM_END + PP_LAST_TURN)

# Conditional rescale (`_cr`, FlashAttention-4's): a row keeps its old maximum while the tile's grew it by at most
# 2^8 in exp2's units, so P <= 256 (fp16 and bf16 hold it; O and the row sums are fp32) and corr is exactly 1; O is
# multiplied only when a lane of the warp has a corr other than 1 (a vote). The multiply moves to the top of a step,
# where every product of the last step has completed: under S(t), where it ran before, a branch would separate a
# wgmma from its wait (ptxas then serialises them all). Without O's rescale a tile took 6% fewer cycles at D=128
# (prefill_item_trace.py --strip rescale).
_MAX_UPDATE = """        corr[r] = ks_exp2((mrow[r] - mx[r]) * sl2);
        mrow[r] = mx[r];"""
_MAX_KEPT = """        const bool keep = (mx[r] - mrow[r]) * sl2 <= 8.f;
        mx[r] = keep ? mrow[r] : mx[r];
        corr[r] = keep ? 1.f : ks_exp2((mrow[r] - mx[r]) * sl2);
        mrow[r] = mx[r];"""
_RESCALE = "      for (int i = 0; i < D / 2; ++i) oacc[i] *= corr[(i >> 1) & 1];"
_RESCALE_VOTED = """      if (!__any_sync(0xffffffffu, corr[0] != 1.f || corr[1] != 1.f)) return;
      #pragma unroll
      for (int i = 0; i < D / 2; ++i) oacc[i] *= corr[(i >> 1) & 1];"""


def conditional_rescale(text: str) -> str:
    """The kernel `text` with `_cr`'s softmax: rows keep their maximum while it grows by at most 2^8, O multiplied
    only when a warp has a row that did not, at the top of each step instead of under S(t)."""
    text = _swap(text, "      #pragma unroll\n" + _RESCALE, _RESCALE_VOTED)
    text = _swap(text, _MAX_UPDATE, _MAX_KEPT)
    text = _swap(text, "issue_s(t);\n      rescale();\n", "issue_s(t);\n", 2)
    for first in ("const int t = t0;", "const int t = t0 + 1;"):
        text = _swap(text, first, first + "\n      rescale();  // O *= corr(t - 1) before P(t - 1) V(t - 1)")
    return text


# Own tiles (`_wt`, producer kernels): each consumer warpgroup multiplies only the tiles its own 64 rows need. A block
# of WG x 64 rows visits every tile its last row needs; under the causal mask warpgroup w needs WG - 1 - w tiles fewer
# at 64 keys a tile (all masked for its rows), and a warpgroup whose rows all lie past L (a partial last block) needs
# none, though without this it multiplies every tile of the item on rows nobody stores. At 192 rows a block and 64
# keys a tile (`WIDE`, `WIDE_PERSIST`) and L = S that is 10.5%, 8.3% and 3.0% of a head's products with the mask at
# L=2048, 4096 and 8192, 2.9%, 3.0% and 0.8% without it; none at 128 rows and 128 keys (`TALL`), whose blocks divide
# those lengths (benchmarks/prefill_tile_count.py). A warpgroup runs its own tiles (one if its rows lie past L: the
# pipeline's shape assumes one), then takes each remaining tile when it lands and hands it back unread, so the
# stages' mbarrier phases stay whole: an arrival on "empty" before the other warpgroups finished the tile STAGES back
# would count toward that earlier phase, and waiting on "full" first rules it out (the producer issued the tile only
# after that phase completed). Ping-pong (`_pp`) takes turns tile by tile and is left out.
_OWN_COUNT = """    // tiles this warpgroup's rows need (`_wt`): none past its last row's diagonal; one if past L
    // (from lane 0: a count ptxas cannot prove the same across the warp takes the loop off the uniform datapath)
    const int wrow = m0 + __shfl_sync(0xffffffffu, wg, 0) * 64;
    const int ctiles = wrow >= L ? 1 : CAUSAL ? min(ntiles, (min(S, wrow + 64 + shift) + BN - 1) / BN) : ntiles;
    wait_full(kfull, 0);"""
_OWN_DRAIN = """
    for (int t = ctiles; t < ntiles; ++t) {  // `_wt`: tiles only other warpgroups need, handed back unread
      wait_full(kfull, t);
      release(kempty, t);
      wait_full(vfull, t);
      release(vempty, t);
    }
"""
# One block an item hands back no last V stage (nothing loads after the item's last tile); a warpgroup that stops
# short must, or the producer would wait for it STAGES tiles on.
_OWN_LAST_V = """
    if (ctiles < ntiles) release(vempty, ctiles - 1);  // `_wt`: its last P V has completed"""


def own_tiles(text: str) -> str:
    """A producer kernel's `text` with `_wt`: each consumer warpgroup's main loop runs to its own tile count
    (`ctiles`), and the tiles past it are waited for and released without a product (tests/test_prefill_own_tiles.py
    runs this hand-over on a model of the stages' mbarriers)."""
    text = _swap(text, "    wait_full(kfull, 0);", _OWN_COUNT)
    for old in ("t0 < ntiles;", "t0 + 1 < ntiles)", "if (ntiles % 2 == 0)", "wait_full(vfull, ntiles - 1);",
                "issue_pv(ntiles - 1, pa[0]);"):
        text = _swap(text, old, old.replace("ntiles", "ctiles"))
    if "release(vempty, ntiles - 1);" in text:  # persistent: the last tile's stage handed back before the next item
        return _swap(_swap(text, "release(vempty, ntiles - 1);", "release(vempty, ctiles - 1);"),
                     EPILOGUE, EPILOGUE + _OWN_DRAIN)
    return _swap(text, EPILOGUE, EPILOGUE + _OWN_LAST_V + _OWN_DRAIN)


# Snake order (`_sn`, persistent blocks): block b takes item b of the first round of gridDim.x items, item G - 1 - b of
# the second, b of the third, and so on, instead of b in every round. The items run longest first, so in the plain
# order block 0 takes the longest item of every round and the last block the shortest. With the causal mask at B 1,
# H 32 (192-row items, 132 blocks, three tiles' start an item) the busiest block has 16.3% more to do than the mean
# at L=4096 and 8.8% at L=8192 (3.1% and 1.9% at B 4); in snake order 1.2% and 0.8% (0.9% and 0.2%)
# (benchmarks/prefill_tile_count.py --schedule). Each round still runs the same items at once, so what L2 holds is
# unchanged; without the mask every item is the same size and the order changes nothing.
_SNAKE_NEXT = """
    // `_sn`: the item after `it` for this block, the rounds alternating in direction
    auto next_item = [&](int it) {
      const int r = it / (int)gridDim.x + 1;
      return r * (int)gridDim.x + ((r & 1) ? (int)gridDim.x - 1 - (int)blockIdx.x : (int)blockIdx.x);
    };
"""


# Uniform index arithmetic (`_uw`): the consumers' warpgroup index read from lane 0 (a value ptxas can prove the same
# across the warp; `threadIdx.x / 128` it cannot) and the persistent kernel's running tile count unsigned (its stage and
# phase a mask and a shift, not a signed division). Q's descriptors and each stage's addresses then stay on the uniform
# datapath: ptxas drops the main loop's 32 vector-to-uniform moves and recomputes no 64-bit descriptor sums in it, from
# 642 to 576 instructions at D=128 for `WIDE` and from 678 to 582 for `WIDE_PERSIST`, whose loop had 36 more than
# `WIDE`'s (python benchmarks/prefill_sass.py).
_WG_PLAIN = "const int wg = threadIdx.x / 128,"
_WG_UNIFORM = "const int wg = __shfl_sync(0xffffffffu, threadIdx.x / 128, 0),"
_COUNT_SIGNED = CONSUMER_COUNT
_COUNT_UNSIGNED = _COUNT_SIGNED.replace("int g0", "unsigned g0")


def uniform_index(text: str) -> str:
    """A producer kernel's `text` with `_uw`: the warpgroup index from lane 0, a persistent kernel's consumers'
    running tile count unsigned."""
    text = _swap(text, _WG_PLAIN, _WG_UNIFORM)
    if _COUNT_SIGNED in text:
        text = _swap(text, _COUNT_SIGNED, _COUNT_UNSIGNED)
    return text


def snake_order(text: str) -> str:
    """A persistent kernel's `text` with `_sn`: the block's items in snake order (the first stays `blockIdx.x`, so
    the first-item tests hold)."""
    text = _swap(text, PERSIST_ITEMS, PERSIST_ITEMS + _SNAKE_NEXT)
    text = _swap(text, "item < ITEMS; item += gridDim.x)", "item < ITEMS; item = next_item(item))", 2)
    text = _swap(text, "item + (int)gridDim.x", "next_item(item)", 3)
    return _swap(text, "item + gridDim.x", "next_item(item)")


# Head sections (`_hs`, persistent blocks): the items walk the heads a section at a time, a section the query heads of
# gridDim.x / 4 K / V heads, longest causal tiles first within it, so that a round of items reads each K / V head
# with about four items at once. In the plain order a round of 132 items takes one row block of up to 132 heads: at
# B 4, Hkv 32 the round's items read 124-127 K / V heads, each tile fetched from HBM by about one item (B 1: four
# items a head; Hkv 8: four query heads a K / V head), and on an H100 (3.35 TB/s) those shapes ran 7% further behind
# cuDNN than on the H200 (4.8 TB/s; 2-16% by shape), where the others did not (`python benchmarks/prefill_tile_count.py
# --schedule NAME_hs --hkv 32`: K / V heads a round and the blocks' balance under the mask, a model).
_SECTIONS = """    // `_hs`: query heads in sections of SEC, those of gridDim.x / 4 K / V heads (four items of a round to one)
    const int SEC = (q_shape[1] / k_shape[1]) * max(1, (int)gridDim.x / 4);
"""
_COORDS_PLAIN = ("const int mt = MT - 1 - item / BH;  // every head's longest causal tiles first\n"
                 "    const int bhq = item % BH,")
_COORDS_SECTIONS = ("const int hsec = item / (SEC * MT), hsn = min(SEC, BH - hsec * SEC), hsr = item - hsec * SEC * MT;\n"
                    "    const int mt = MT - 1 - hsr / hsn;  // `_hs`: longest causal tiles first within a section\n"
                    "    const int bhq = hsec * SEC + hsr % hsn,")


def head_sections(text: str) -> str:
    """A persistent kernel's `text` with `_hs`: its items (producer's and consumers' alike) a section of heads at a
    time (tests/test_prefill_head_sections.py runs the kernel's own formula)."""
    text = _swap(text, PERSIST_ITEMS, PERSIST_ITEMS + _SECTIONS)
    return _swap(text, _COORDS_PLAIN, _COORDS_SECTIONS, 2)
