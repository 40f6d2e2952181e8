"""Q by tensor copies in the persistent prefill (`_qt`): the producer copies each item's Q into shared memory with the
128-byte swizzle, as it copies a K tile, and the consumers wait for it on an mbarrier instead of loading it.

Why: the item trace at B 1, L=4096, D=128 without the mask (H100, `prefill-item-trace-key-split-tail-b1-*.json`) has an
item spend 3.3 tiles' time beyond its 64, of which the wait for Q is 2.0 and issuing its copy 1.6: each consumer thread
issues eight 16-byte `cp.async` and their addresses, then waits, then the warpgroup meets at a barrier. Here one
producer thread issues two copies a warpgroup (64 rows x 64 columns each); the consumers issue nothing for Q.

When: the producer copies an item's Q as it issues the item's last K / V tile of its first STAGES (tile 0 for the
block's first item), after the consumers' arrival on `qempty`, which each consumer warp makes once its last product
of the item before has completed (no wgmma reads Q any more). By then that item's last K tile is released, so the
wait costs the producer at most the last P V; the copy then runs under that product and the epilogue. As it issues the
item's first tile, STAGES - 1 tiles before the copy, the producer asks L2 for the item's Q through the same map (a
tensor prefetch a box), so that the copy finds it there (not measured apart; a bulk prefetch of the rows by address
instead spilled 12-28 more bytes in the producer). One buffer: two would make Q's descriptors change from item to
item, which cost the main loop 28 instructions a pair of tiles at D=128 (two Q buffers, benchmarks/findings.md).
The phases: `qfull` completes once an item (the producer's expected bytes), `qempty` once an item (one arrival a consumer warp);
each side waits on the other's phase of the item before, so neither runs two phases ahead.

Q's rows past L (a partial last block) are filled with zeros by the copy, computed on and never stored. The map over
q is encoded on the host as K's is (`qmap`, an input), its address set in the kernel and published beside K's and V's
in the block's slot of the scratch output `maps` (three maps a block instead of two).
"""

from __future__ import annotations

from ksearch.kernels.attention.wgmma_ws_text import CONSUMER_COUNT, CONSUMER_ITEM_END, swap_once

_FRAME_BARS = ("    unsigned long long *kfull = bars, *kempty = bars + STAGES, *vfull = bars + 2 * STAGES, "
               "*vempty = bars + 3 * STAGES;\n")
_Q_BARS = "    unsigned long long *qfull = bars + 4 * STAGES, *qempty = qfull + 1;  // `_qt`: Q copied, Q read\n"
_INIT_END = "        ks_mbar_init(vfull + i, BULK ? 1 : PT); ks_mbar_init(vempty + i, NT / 32);\n      }\n"
_Q_INIT = "      ks_mbar_init(qfull, 1); ks_mbar_init(qempty, NT / 32);  // `_qt`: the producer; a consumer warp\n"
_SMAP = "bars + 4 * STAGES) + 127"
_MAPS_FILLED = "if (lane < 16) { smap[lane] = tmap[lane]; smap[16 + lane] = tmap[lane]; }"
_ADDRESSES = "if (lane == 0) { ks_tmap_address(smap, k); ks_tmap_address(smap + 16, v); }"
_PUBLISH_V = "          ks_tmap_publish(gmap + 16, smap + 16);\n"
_ACQUIRE_V = "          ks_tmap_acquire(gmap + 16);\n"
_SLOT = "(size_t)blockIdx.x * 32;"
_PRODUCER_COUNT = "          int g0 = 0;\n"
_PRODUCER_END = "          g0 += ntiles;\n"
_PRODUCER_TILE = "            const int gt = g0 + t, st = gt % STAGES, ph = (gt / STAGES) & 1;\n"
_Q_COPY = """            if (qi > 0 && t == 0 && ntiles > 1) {  // `_qt`: this item's Q into L2 ahead of its copy
              for (int w = 0; w < WG; ++w) {
                #pragma unroll
                for (int c = 0; c < D / 64; ++c)
                  asm volatile("cp.async.bulk.prefetch.tensor.3d.L2.global.tile [%0, {%1, %2, %3}];\\n"
                               :: "l"(gmap + 32), "r"(c * 64), "r"(m0 + w * 64), "r"(bhq) : "memory");
              }
            }
            if (t == (qi == 0 ? 0 : min(STAGES, ntiles) - 1)) {  // `_qt`: this item's Q
              if (qi > 0) ks_mbar_wait(qempty, (qi - 1) & 1);  // the consumers are done with the last item's
              ks_mbar_expect(qfull, BM * D * (int)sizeof(T));
              for (int w = 0; w < WG; ++w) {
                #pragma unroll
                for (int c = 0; c < D / 64; ++c)
                  ks_tma_load3(ks_saddr(Qs + w * 64 * D + c * 64 * 64), gmap + 32, c * 64, m0 + w * 64, bhq, qfull);
              }
            }
"""
# Q at byte 1024 of shared memory, whose start is 1024-aligned: an address the compiler knows keeps Q's descriptors
# constants (made from a run-time alignment, ptxas rebuilt them in the main loop: 642 instructions a pair of tiles
# against 588 at D=128); a start that is not so aligned would break the swizzle, so a block that finds one traps
_SMEM = "extern __shared__ __align__(128) unsigned char ks_smem[];"
_Q_ALIGNED = ("T* Qs = ones + 512;  // `_qt`: swizzled, at byte 1024\n"
              "    if (threadIdx.x == 0 && (ks_saddr(Qs) & 1023)) __trap();")
_COUNT = CONSUMER_COUNT
_CONSUMER_LOAD = """    if (!QNEXT || item == blockIdx.x)
      ks_load_core<D, 128, 64>(Qs + wg * 64 * D, qg + (size_t)wg * 64 * D, max(0, min(64, rows_here - wg * 64)), wt);
    if (!QNEXT || item == blockIdx.x) ks_commit_w();
    ks_wait_w<0>();
    ks_proxy_fence();
    asm volatile("bar.sync %0, 128;\\n" :: "r"(1 + wg) : "memory");
"""
_CONSUMER_WAIT = "    ks_mbar_wait(qfull, qi & 1);  // `_qt`: this item's Q, copied by the producer\n"
_LAST_PRODUCT = "  // the next item's tiles reuse the stage"
_Q_READ = "\nif (lane == 0) ks_mbar_arrive(qempty);  // `_qt`: this warp's products are done with Q"
_ITEM_END = CONSUMER_ITEM_END
_Q_DESC = "ks_desc(Qs + wg * 64 * D, qk_lead, qk_stride);"
_Q_DESC_SWIZZLED = "ks_desc(Qs + wg * 64 * D, 16, 1024) | kv_swizzle;  // `_qt`: Q as a 64-row swizzled tile"
_ISSUE_S = "    auto issue_s = [&](int t) {"
_Q_OFF = ("    // `_qt`: Q's offset for its 16 columns kc, in descriptor units: 32 bytes along a 128-byte row, 64 rows x 128\n"
          "    // bytes to the next 64 columns\n"
          "    auto q_off = [](int kc) { return (kc >> 2) * (64 * 8) + (kc & 3) * 2; };\n")


def _swap(text: str, old: str, new: str, count: int = 1) -> str:
    return swap_once(text, old, new, count, "_qt")


def q_by_tensor_copy(text: str) -> str:
    """A persistent tensor-copy kernel's `text` (the 128-byte swizzle; item order and `_kt` already applied, before
    `_uw`) with `_qt`: Q aligned and swizzled, copied by the producer, waited for and released on mbarriers."""
    text = _swap(text, _FRAME_BARS, _FRAME_BARS + _Q_BARS)
    text = _swap(text, _INIT_END, _INIT_END + _Q_INIT)
    text = _swap(text, _SMAP, "bars + 4 * STAGES + 2) + 127")  # the maps after the two Q barriers
    text = _swap(text, _MAPS_FILLED, _MAPS_FILLED[:-2] + " smap[32 + lane] = qmap[lane]; }")
    text = _swap(text, _ADDRESSES, _ADDRESSES[:-2] + " ks_tmap_address(smap + 32, q); }")
    text = _swap(text, _PUBLISH_V, _PUBLISH_V + _PUBLISH_V.replace("16", "32"))
    text = _swap(text, _ACQUIRE_V, _ACQUIRE_V + _ACQUIRE_V.replace("16", "32"))
    text = _swap(text, _SLOT, "(size_t)blockIdx.x * 48;  // `_qt`: three maps a block")
    text = _swap(text, _PRODUCER_COUNT, _PRODUCER_COUNT + "          unsigned qi = 0;  // `_qt`: items before this one\n")
    text = _swap(text, _PRODUCER_END, _PRODUCER_END + "          ++qi;\n")
    text = _swap(text, _PRODUCER_TILE, _PRODUCER_TILE + _Q_COPY)
    text = _swap(text, _SMEM, _SMEM.replace("128", "1024"))
    text = _swap(text, "T* Qs = ones + 128;", _Q_ALIGNED)
    text = _swap(text, _COUNT, _COUNT + "    unsigned qi = 0;  // `_qt`: the block's items before this one\n")
    text = _swap(text, _CONSUMER_LOAD, _CONSUMER_WAIT)
    text = _swap(text, _LAST_PRODUCT, _LAST_PRODUCT + _Q_READ)
    text = _swap(text, _ITEM_END, "    g0 += ntiles;\n    ++qi;\n    }\n")
    text = _swap(text, _Q_DESC, _Q_DESC_SWIZZLED)
    text = _swap(text, _ISSUE_S, _Q_OFF + _ISSUE_S)
    return _swap(text, "dq0 + 16 * kc", "dq0 + q_off(kc)", 2)
