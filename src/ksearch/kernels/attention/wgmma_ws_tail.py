"""The persistent prefill's last round split along the keys (`_kt`, no mask): the text the option adds to the kernel
and the host's side of it (how many parts, the scratch they leave their rows in, the arrival counters).

A persistent launch of G blocks runs ITEMS work items in rounds of G; where ITEMS is not a multiple of G the last
round has TAIL = ITEMS mod G items, and the kernel ends when the blocks that run them do: at B 1, L=4096, D=128
(704 items on 132 blocks, 5.33 rounds) an H100 trace has the kernel span 1.19 times its median block's busy time
(prefill-item-trace-last-round-*-h100-*.json). With `_kt` each of the TAIL items runs as KT parts, each a contiguous
share of the key tiles, KT = min(G / TAIL, MAX_PARTS, key tiles): the round's TAIL x KT parts take at most G blocks.
A part's warps leave their rows' unnormalised O, running maxima and sums in the scratch output `part`, then count
themselves in on the counter of their rows; the warp that arrives last merges the other parts' records into its own
registers and stores O as the plain epilogue does.

The counters are an input (`counts`), a new zeroed array every launch (`fresh_counters`): MLX's `init_value` would
fill every output of the kernel, O (q's size) among them. A new array a launch is what keeps launches apart: MLX's
CUDA graphs order kernels only by the arrays they pass, so two launches counting on one kept buffer may run side by
side and merge each other's parts, and under `mx.compile` a kept buffer would be one constant for every replay.
"""

from __future__ import annotations

import re
from typing import Any

from ksearch.kernels.attention.wgmma_ws_text import swap_once

# Only a last round of at most G / 2 items splits. Three parts over two rounds where it holds at most 2 G / 3 (B 1
# and B 4 at L=2048, D=128: 88 of 132), which the schedule model put 4.8% ahead at B 1 (prefill_tile_count.py
# --parts 3), ran on the H200 at 0.946x / 0.968x of the unsplit kernel's speed with the calls chained (two
# processes) and 0.885x independent over those 8 shapes (benchmarks/findings.md).
# A warp's record: the D / 2 floats of O a lane holds, in float4 chunks each warp writes 512 contiguous bytes of, then
# one float4 a lane: the maxima and the sums of its two rows. At most 4 parts: each one more adds a record the merging
# block reads (96 KB at 192 rows x 128 columns) against a smaller share of tiles saved; timed with 2 and 3 parts only.
MAX_PARTS = 4
WARPS = 4  # warps a consumer warpgroup

_PREAMBLE = """
    // `_kt` (no mask): the last round's KT_TAIL items in KT parts each along the keys, merged by the last to finish
    const int KT_FULL = ITEMS / (int)gridDim.x * (int)gridDim.x, KT_TAIL = ITEMS - KT_FULL;
    const int KT = CAUSAL || KT_TAIL == 0 ? 1 : min(min((int)gridDim.x / KT_TAIL, {MAX_PARTS}), (k_shape[2] + BN - 1) / BN);
    const int VITEMS = KT_FULL + KT_TAIL * KT;
"""
_LOOP = re.compile(r"for \(int item = blockIdx\.x; item < ITEMS; (item = next_item\(item\)|item \+= gridDim\.x)\) \{")
_LOOP_KT = ("for (int vitem = blockIdx.x; vitem < VITEMS; {step}) {{\n"
            "    const bool kt_part = KT > 1 && vitem >= KT_FULL;  // a part of a split last-round item\n"
            "    const int kparts = kt_part ? KT : 1, kpart = kt_part ? (vitem - KT_FULL) / KT_TAIL : 0;\n"
            "    const int item = kt_part ? KT_FULL + (vitem - KT_FULL) % KT_TAIL : vitem;")
_NTILES = "    const int ntiles = (n_end + BN - 1) / BN;\n"
_NTILES_KT = ("    const int t_lo = kpart * ((n_end + BN - 1) / BN) / kparts;  // `_kt`: this part's key tiles\n"
              "    const int ntiles = (kpart + 1) * ((n_end + BN - 1) / BN) / kparts - t_lo;\n")
_COPIES = (("copy(Ks + st * KB, gmap, t, bh,", "copy(Ks + st * KB, gmap, t_lo + t, bh,"),
           ("copy(Vs + st * KB, gmap + 16, t, bh,", "copy(Vs + st * KB, gmap + 16, t_lo + t, bh,"))
EPILOGUE_START = "    ks_fence_regs<4>(lacc);\n    const float lrow[2]"
_STORE = "if (row_lo < L) *reinterpret_cast<uint4*>(og"
_STORE_KT = "if (kt_store && row_lo < L) *reinterpret_cast<uint4*>(og"
_MERGE = r"""    // `_kt`: a part's warp leaves its rows' O, maxima and sums as a record, then counts itself in; the warp that
    // arrives last merges the other parts' records into its registers and stores O (a warpgroup past L stores none).
    bool kt_store = true;
    if (kparts > 1 && m0 + wg * 64 < L) {  // a warpgroup past L has no rows: no record, nothing to store
      const int ti = item - KT_FULL;
      const size_t ml_at = (size_t)KT_TAIL * KT * WG * 4 * 32 * (D / 8);  // float4s before the maxima and sums
      const size_t rec = (((size_t)kpart * KT_TAIL + ti) * WG + wg) * 4 + warp;
      float4* const recs = reinterpret_cast<float4*>(part);
      #pragma unroll
      for (int c = 0; c < D / 8; ++c)
        recs[(rec * (D / 8) + c) * 32 + lane] = make_float4(oacc[4 * c], oacc[4 * c + 1], oacc[4 * c + 2], oacc[4 * c + 3]);
      recs[ml_at + rec * 32 + lane] = make_float4(mrow[0], mrow[1], lacc[0], lacc[2]);
      __threadfence();
      __syncwarp();
      unsigned* const count = const_cast<unsigned*>(counts) + ((size_t)ti * WG + wg) * 4 + warp;
      unsigned before = 0;
      if (lane == 0) before = atomicAdd(count, 1u);
      before = __shfl_sync(0xffffffffu, before, 0);
      kt_store = before == (unsigned)kparts - 1;
      if (kt_store) {
        __threadfence();
        float m[2] = {mrow[0], mrow[1]}, l[2] = {lacc[0], lacc[2]};
        for (int p = 0; p < kparts; ++p) {
          if (p == kpart) continue;
          const size_t other = (((size_t)p * KT_TAIL + ti) * WG + wg) * 4 + warp;
          const float4 ml = __ldcg(recs + ml_at + other * 32 + lane);
          const float mo[2] = {ml.x, ml.y}, lo[2] = {ml.z, ml.w};
          float a[2], b[2];
          #pragma unroll
          for (int r = 0; r < 2; ++r) {
            const float mn = fmaxf(m[r], mo[r]);
            a[r] = ks_exp2((m[r] - mn) * sl2);
            b[r] = ks_exp2((mo[r] - mn) * sl2);
            m[r] = mn;
            l[r] = l[r] * a[r] + lo[r] * b[r];
          }
          #pragma unroll
          for (int c = 0; c < D / 8; ++c) {  // elements 4c, 4c + 1 are row_lo's, 4c + 2, 4c + 3 row_lo + 8's
            const float4 x = __ldcg(recs + (other * (D / 8) + c) * 32 + lane);
            oacc[4 * c] = oacc[4 * c] * a[0] + x.x * b[0];
            oacc[4 * c + 1] = oacc[4 * c + 1] * a[0] + x.y * b[0];
            oacc[4 * c + 2] = oacc[4 * c + 2] * a[1] + x.z * b[1];
            oacc[4 * c + 3] = oacc[4 * c + 3] * a[1] + x.w * b[1];
          }
        }
        lacc[0] = l[0];
        lacc[2] = l[1];
      }
    }
"""


def _swap(text: str, old: str, new: str, count: int = 1) -> str:
    return swap_once(text, old, new, count, "_kt")


def key_split_tail(text: str, items_anchor: str) -> str:
    """A persistent kernel's `text` with `_kt`: the preamble after `items_anchor` (the line that defines ITEMS), both
    item loops over the virtual items (a last-round item's parts after the full rounds), each part's key tiles, and
    the parts' records and merge before the epilogue, whose store only the merging warp makes."""
    text = _swap(text, items_anchor, items_anchor + _PREAMBLE.replace("{MAX_PARTS}", str(MAX_PARTS)))
    loops = _LOOP.findall(text)
    if len(loops) != 2:
        raise RuntimeError(f"_kt: the item loop occurs {len(loops)} times in the kernel text, not 2")
    text = _LOOP.sub(lambda m: _LOOP_KT.format(step=re.sub(r"\bitem\b", "vitem", m[1])), text)
    text = _swap(text, _NTILES, _NTILES_KT, 2)
    for old, new in _COPIES:
        text = _swap(text, old, new)
    text = _swap(text, EPILOGUE_START, _MERGE + EPILOGUE_START)
    return merger_stores(text)


def merger_stores(epilogue: str) -> str:
    """The 16-byte store epilogue (or a text that holds it) with its stores made only by a merging warp."""
    return _swap(epilogue, _STORE, _STORE_KT)


def tail_parts(items: int, grid: int, key_tiles: int, causal: bool) -> tuple[int, int, int]:
    """(items in full rounds, last-round items, parts each) as the kernel's preamble computes them."""
    full = items // grid * grid
    tail = items - full
    parts = 1 if causal or tail == 0 else min(grid // tail, MAX_PARTS, key_tiles)
    return full, tail, parts


def scratch_floats(items: int, grid: int, key_tiles: int, causal: bool, wg: int, d: int) -> int:
    """Floats of the `part` output: a record (D / 2 floats a lane, and 4) for every warp of every part."""
    _, tail, parts = tail_parts(items, grid, key_tiles, causal)
    warps = tail * parts * wg * WARPS if parts > 1 else 0
    return max(4, warps * 32 * (d // 2 + 4))


def counter_count(items: int, grid: int, wg: int) -> int:
    """Arrival counters: one for each warp of each last-round item (at least one, so the input exists)."""
    return max(1, (items - items // grid * grid) * wg * WARPS)


def fresh_counters(count: int) -> Any:
    """`count` zeroed arrival counters for one launch, a new array every call (a fill MLX runs on the device, with no
    wait on anything before it)."""
    import mlx.core as mx

    return mx.zeros((count,), dtype=mx.uint32)
