"""P's exponentials ahead of the tile's maximum (`_xa`, producer kernels with `_cr`): tile t's P is taken on the rows'
maxima before the tile, while the tile's own maxima are found beside the exponentials instead of before them; where a
row's maximum grew past 2^8 in the tile (the bound `_cr` keeps P within), the warpgroup runs the tile again exactly.

Why: at D=128 the row maxima took 11% of a tile's cycles (`prefill_item_trace.py --strip exp,max`, docs): they sit on
each warpgroup's path from its S product's wait to the exponentials, a tree of 16 `fmaxf` a row and two shuffles
across the row's four lanes before the first exponential can start. Under `_cr` a row keeps its maximum while a tile
grows it by at most 2^8, and on ordinary scores that is nearly every tile after a row's first, so the maxima before the
tile are the ones the exponentials use anyway. Here they use them without waiting: each lane's maximum of its own
elements (no shuffles: any lane whose elements grew its row past 2^8 says so) decides only whether the tile is kept.
With `_r1` not even those: each lane already sums its P values in fp32 for the row sums' one product, and a lane whose
sum of a row's values stays within 2^8 has none past it, so that sum decides (a sum past 2^8 of values that are not, a
row grown by more than 2^4, runs the tile again needlessly: slower, the same output).

The check is one vote over the warpgroup's 128 threads (`bar.red.or`, named barrier 4 + wg) after the row sums'
product is issued, while O += P(t-1) V(t-1) may still run. A warpgroup that finds a grown row (rare: standard normal
scores move a row's maximum by 8 more after its first tile practically never) runs tile t again where every product
has completed: its row sums back to what they were before the tile, S(t) again from the stage (K(t)'s stage is handed
back only after that), and the exact softmax with the tile's own maximum wherever it grew the row's (not `_cr`'s rule,
which keeps a maximum grown by up to 8: a row whose later scores sit 4-8 above its first tile's would pass the sums'
vote again every tile; with the maximum taken, once: on an H100 scores stepped 6 units up ran 1,626 cycles a tile
against 1,868 without `_xa`, as on ordinary scores). So the kernel's output is the exact online softmax for any
input, and its P never exceeds 2^8 where it is kept. Tile 0 of an item keeps the exact softmax (no maximum before
it).

Measured on an H100 (docs/kernels-attention.md): 5-11% faster in every D=128 group of the 96 benchmark shapes, the
dispatch's at D=128 since (1.015x-1.018x of cuDNN over the set); where rows' maxima keep growing tile after tile most
tiles run twice (61% more cycles a tile on scores rising about 2^8 a tile)."""

from __future__ import annotations

from ksearch.kernels.attention.wgmma_ws_text import swap_once

_SOFTMAX = "    auto softmax = [&](int t) {\n"
_SOFTMAX_END = "    auto rescale = [&]() {"
# The exact softmax from its mask on; `_xa`'s lambda keeps the mask and replaces what follows it.
_MAX_AND_EXP_FROM = "      #pragma unroll\n      for (int i = 0; i < BN / 2; ++i) mx[(i >> 1) & 1] = fmaxf("
_AHEAD = r"""      *lsave = make_float2(lacc[0], lacc[2]);  // the row sums before this tile, should it run again
      const float msc[2] = {mrow[0] * sl2, mrow[1] * sl2};
      #pragma unroll
      for (int i = 0; i < BN / 2; ++i) {  // the lane's own maxima beside the exponentials, not before them
        mx[(i >> 1) & 1] = fmaxf(mx[(i >> 1) & 1], s[i]);
        s[i] = ks_exp2(fmaf(s[i], sl2, -msc[(i >> 1) & 1]));
      }
      corr[0] = corr[1] = 1.f;
      grown = (fmaf(mx[0], sl2, -msc[0]) > 8.f) | (fmaf(mx[1], sl2, -msc[1]) > 8.f);  // no branch
    };
"""
# With `_r1`'s fp32 sums of a lane's P (wgmma_ws_row_sums), no maxima at all: the sums decide, in pack_p.
_AHEAD_SUMMED = r"""      *lsave = make_float2(lacc[0], lacc[2]);  // the row sums before this tile, should it run again
      const float msc[2] = {mrow[0] * sl2, mrow[1] * sl2};
      #pragma unroll
      for (int i = 0; i < BN / 2; ++i) s[i] = ks_exp2(fmaf(s[i], sl2, -msc[(i >> 1) & 1]));
      corr[0] = corr[1] = 1.f;
    };
"""
# The exact softmax (tile 0, a tile run again): a row takes the tile's maximum wherever it grew, whereas `_cr` keeps it
# while it grows by at most 8. Run again, a tile kept under `_cr`'s rule would leave the maximum where the sums' vote
# fails again on the next tile, and the next: rows stepped 5-7 units above their first two tiles ran again 67-99% of
# their warpgroup's later tiles in the host model (tests/test_prefill_exp_ahead.py), one with the maximum taken.
_KEEP_CR = "        const bool keep = (mx[r] - mrow[r]) * sl2 <= 8.f;\n"
_KEEP_TAKEN = "        const bool keep = mx[r] == mrow[r];  // `_xa`: the tile's own maximum wherever it grew\n"
_R1_PACKED = "        for (int c = 0; c < 4; ++c) psum[c] = ks_pack2<T>(se[2 * c], se[2 * c + 1]);\n"
# se[e] of register e / 2 of the A fragment: rows g (e = 0, 1, 4, 5) and g + 8 (e = 2, 3, 6, 7)
_GROWN_FROM_SUMS = ("        grown = (se[0] + se[1] + se[4] + se[5] > 256.f) | (se[2] + se[3] + se[6] + se[7] > 256.f);"
                    "  // `_xa`\n")
_STATE = r"""    // `_xa` (wgmma_ws_ahead): whether a lane's elements of the last tile grew its row's maximum past 2^8 (with `_r1`:
    // whether its sum of a row's P passed 2^8), and the row sums before that tile
    bool grown = false;
    // The row sums before the last tile: in shared memory, a float2 a consumer thread ahead of Q (two more registers
    // held through the softmax made ptxas serialise every wgmma, C7511)
    float2* const lsave = reinterpret_cast<float2*>(ks_smem + 256) + threadIdx.x;
    // Whether any of this warpgroup's threads has `pred`: one reduction over its 128 threads on named barrier `id`.
    auto wg_any = [](bool pred, int id) {
      unsigned r;
      asm volatile("{\n .reg .pred p, q;\n setp.ne.u32 p, %1, 0;\n bar.red.or.pred q, %2, 128, p;\n"
                   " selp.u32 %0, 1, 0, q;\n}\n" : "=r"(r) : "r"((unsigned)pred), "r"(id) : "memory");
      return __shfl_sync(0xffffffffu, r, 0) != 0;  // from lane 0: a branch on it ptxas knows warp-uniform
    };
"""
_AGAIN_BEFORE = "    // Waiting on a \"full\" mbarrier"
_AGAIN = r"""    // `_xa`: tile t again, exactly, where every product has completed: the row sums as before it, S(t) from its stage
    // (not yet handed back), the exact softmax (the tile's maximum taken), P into `p` (the buffer this step packed)
    // and its row sums.
    auto tile_again = [&](int t, unsigned (&p)[BN / 16][4]) {
      const float2 l = *lsave;
      lacc[0] = lacc[1] = l.x; lacc[2] = lacc[3] = l.y;
      ks_fence_regs<BN / 2>(s);
      ks_wg_fence();
      issue_s(t);
      ks_wg_wait0();
      ks_fence_regs<BN / 2>(s);
      softmax(t);
      pack_p(p);
      issue_sum(p);
      ks_wg_wait0();
      ks_fence_regs<4>(lacc);
    };

"""
_Q_AT = "    T* Qs = ones + 128;\n"
_Q_AFTER_SUMS = "    T* Qs = ones + 128 + NT * 4;  // `_xa`: the consumers' saved row sums (a float2 each) before Q\n"
_STEP_SOFTMAX = "      ks_wg_wait1();\n      ks_fence_regs<BN / 2>(s);\n      release(kempty, t);\n      softmax(t);\n"
_STEP_AHEAD = "      ks_wg_wait1();\n      ks_fence_regs<BN / 2>(s);\n      softmax_ahead(t);\n"
_STEP_TAIL = """      issue_sum(pa[{nxt}]);  // after the whole softmax, and the wait below stays after it
      ks_wg_wait0();
      ks_fence_regs<4>(lacc);
      ks_fence_regs<D / 2>(oacc);
      ks_fence_u<BN / 4>(&pa[{cur}][0][0]);
"""
_STEP_TAIL_AHEAD = """      issue_sum(pa[{nxt}]);  // after the whole softmax, and the wait below stays after it
      const bool redo = wg_any(grown, 4 + wg);  // `_xa`: a row of this warpgroup grew past 2^8 in tile t
      ks_wg_wait0();
      ks_fence_regs<4>(lacc);
      ks_fence_regs<D / 2>(oacc);
      ks_fence_u<BN / 4>(&pa[{cur}][0][0]);
      if (redo) tile_again(t, pa[{nxt}]);
      release(kempty, t);  // after the tile could have run again
"""


def exp_ahead(text: str) -> str:
    """A producer kernel's `text` (with `_cr`) with `_xa`: each step's softmax takes P on the maxima before the tile
    and a warpgroup runs a tile whose rows grew past 2^8 again exactly (tests/test_prefill_exp_ahead.py)."""
    what = "_xa (exponentials ahead of the maximum)"
    start = text.index(_SOFTMAX) if _SOFTMAX in text else -1
    end = text.find(_SOFTMAX_END, start)
    if start < 0 or end < 0 or _MAX_AND_EXP_FROM not in text[start:end]:
        raise RuntimeError(f"{what}: the prefill kernel text has no softmax to change")
    exact = text[start:end]
    if exact.count(_KEEP_CR) != 1:
        raise RuntimeError(f"{what}: the prefill kernel's softmax has no `_cr` rule to change")
    text = text[:start] + exact.replace(_KEEP_CR, _KEEP_TAKEN) + text[end:]
    summed = _R1_PACKED in text
    ahead = (exact[:exact.index(_MAX_AND_EXP_FROM)].replace("auto softmax = ", "auto softmax_ahead = ")
             + (_AHEAD_SUMMED if summed else _AHEAD))
    if summed:
        text = swap_once(text, _R1_PACKED, _R1_PACKED + _GROWN_FROM_SUMS, what=what)
    text = swap_once(text, _Q_AT, _Q_AFTER_SUMS, what=what)
    text = swap_once(text, _SOFTMAX_END, _STATE + ahead + _SOFTMAX_END, what=what)
    text = swap_once(text, _AGAIN_BEFORE, _AGAIN + _AGAIN_BEFORE, what=what)
    text = swap_once(text, _STEP_SOFTMAX, _STEP_AHEAD, count=2, what=what)
    for cur, nxt in ((0, 1), (1, 0)):
        text = swap_once(text, _STEP_TAIL.format(cur=cur, nxt=nxt), _STEP_TAIL_AHEAD.format(cur=cur, nxt=nxt),
                         what=what)
    return text
