"""Two Q buffers in the persistent prefill (`_q2`): a block's k-th item reads Q from buffer k % 2, and each consumer
warpgroup issues its rows of the block's next item's Q into the other buffer as soon as this item's Q is in, so the
load runs under the whole item instead of opening the next one.

Why: at B 1, L=4096, D=128 without the mask (the dispatch's `WIDE_SPLIT_TAIL`, 0.89x-0.94x of cuDNN on the H200) an
item's cost beyond its 64 tiles is 4.6% on the H100 trace, the wait for Q about two tiles of it. A first form of this
option (before `_uw`, `_hs` and `_kt`) was timed at D=64 and at D=128 with the mask, level with the kernels it would
replace (benchmarks/findings.md); this one composes with the item orders (`_sn`, `_hs`) and the split last round
(`_kt`); on an H100 it matched fp32 and ran 1-5% behind the dispatch at D=128, L=4096. Its costs, seen before that: Q's descriptors change from item to item, and ptxas
rebuilds some in the main loop (616 instructions a pair of tiles against 588 at D=128, `prefill_sass.py`); the copy
is issued right after the item's barrier, in front of its first S product, which the first form's trace saw take
1.15 tiles' time against 0.4. Q by the producer's tensor copies (`_qt`, wgmma_ws_q_tma.py) has neither.

The next item's coordinates are the kernel's own: the loop's step and the statements that map a (virtual) item to
its query head and first row are taken from the text and re-run in a block of their own, so an order added later
cannot leave this load behind. The other buffer's last reader was the previous item's S products, which completed
before its epilogue; each warpgroup loads and reads only its own 64 rows. The load's completion is waited for where
the item's own load was (`ks_wait_w<0>` at the next item's top), before the proxy fence and the warpgroup's barrier.
"""

from __future__ import annotations

import re

from ksearch.kernels.attention.wgmma_ws_text import CONSUMER_COUNT, CONSUMER_ITEM_END, swap_once

_COUNT = CONSUMER_COUNT
_LOOP = re.compile(re.escape(_COUNT) + r"    for \(int (v?item) = blockIdx\.x; \1 < (V?ITEMS); (.*?)\) \{\n")
_Q_BARRIER = '    ks_wait_w<0>();\n    ks_proxy_fence();\n    asm volatile("bar.sync %0, 128;\\n" :: "r"(1 + wg) : "memory");\n'
_FIRST_LOAD = "    if (!QNEXT || item == blockIdx.x)\n      ks_load_core<D, 128, 64>(Qs + "
_FIRST_COMMIT = "    if (!QNEXT || item == blockIdx.x) ks_commit_w();\n"
_ITEM_END = CONSUMER_ITEM_END
# Both buffers' descriptors made once, one picked an item. Made from the item's buffer address inside the item loop,
# ptxas rebuilt Q's seven further descriptors in the main loop: 624-626 instructions a pair of tiles at D=128 without
# the mask against one buffer's 582-588 (prefill_sass.py); picked, 616, and no spills
_COUNT_ITEMS = """    unsigned qk = 0;  // `_q2`: the block's items before this one
    const unsigned long long dq_even = ks_desc(Qs0 + wg * 64 * D, qk_lead, qk_stride);
    const unsigned long long dq_odd = dq_even + QB * sizeof(T) / 16;  // descriptor units of 16 bytes
"""
_Q_DESC = "    const unsigned long long dq0 = ks_desc(Qs + wg * 64 * D, qk_lead, qk_stride);\n"
_Q_DESC_SELECTED = "    const unsigned long long dq0 = (qk & 1) ? dq_odd : dq_even;  // `_q2`: this item's buffer\n"
# Statements of the item's coordinates that the next item's load does not need (and nvcc would warn of as unused)
_UNNEEDED = ("    const int Hq = ", "    const int kparts = ")
NEXT_LOAD = """    const int q2_next = {step};  // `_q2`: the block's next item, its Q into the other buffer under this one
    if (q2_next < {limit}) {{
      const int {var} = q2_next;
{coords}      const int m0 = mt * BM;
      ks_load_core<D, 128, 64>(Qs0 + ((qk + 1) & 1) * QB + wg * 64 * D, q + ((size_t)bhq * L + m0 + wg * 64) * D,
                               max(0, min(64, min(BM, L - m0) - wg * 64)), wt);
      ks_commit_w();
    }}
"""


def _swap(text: str, old: str, new: str, count: int = 1) -> str:
    return swap_once(text, old, new, count, "_q2")


def _next_step(var: str, step: str) -> str:
    """The loop's step as an expression of the current item: `item = next_item(item)` or `item += gridDim.x`."""
    if step.startswith(f"{var} = "):
        return step[len(var) + 3:]
    if step == f"{var} += gridDim.x":
        return f"{var} + (int)gridDim.x"
    raise RuntimeError(f"_q2: the item loop's step {step!r} is neither an assignment nor += gridDim.x")


def next_item_load(text: str) -> str:
    """The block that loads the next item's Q: the consumers' loop step, then the statements from the loop's top to
    the query head (`bhq`), in a scope of their own (the names shadow this item's)."""
    loop = list(_LOOP.finditer(text))
    if len(loop) != 1:
        raise RuntimeError(f"_q2: the consumers' item loop occurs {len(loop)} times in the kernel text, not 1")
    var, limit, step = loop[0][1], loop[0][2], loop[0][3]
    head = text.index("    const int bhq = ", loop[0].end())
    bhq = text[head:text.index(", b = bhq / Hq", head)] + ";\n"
    lines = [line for line in (text[loop[0].end():head] + bhq).splitlines(keepends=True)
             if not line.startswith(_UNNEEDED)]
    return NEXT_LOAD.format(step=_next_step(var, step), limit=limit, var=var,
                            coords="".join("  " + line for line in lines))


def double_q(text: str) -> str:
    """A persistent kernel's `text` (with its item order and `_kt` already applied, before `_uw`) with two Q buffers:
    the K / V stages after both, a running count `qk` of the block's items, the first item's own load, each item's
    load of the next one's Q after its own is in."""
    load = next_item_load(text)
    text = _swap(text, "T* Qs = ones + 128;", "T* const Qs0 = ones + 128;  // two Q buffers (`_q2`): item qk in qk % 2")
    text = _swap(text, "Qs + QB", "Qs0 + 2 * QB", 2)  # the K / V stages after both
    text = _swap(text, _COUNT, _COUNT + _COUNT_ITEMS)
    text = _swap(text, _Q_DESC, _Q_DESC_SELECTED)
    text = _swap(text, _FIRST_LOAD, "    T* const Qs = Qs0 + (qk & 1) * QB;\n"
                 + _FIRST_LOAD.replace("!QNEXT || item == blockIdx.x", "qk == 0"))
    text = _swap(text, _FIRST_COMMIT, _FIRST_COMMIT.replace("!QNEXT || item == blockIdx.x", "qk == 0"))
    text = _swap(text, _Q_BARRIER, _Q_BARRIER + load)
    return _swap(text, _ITEM_END, "    g0 += ntiles;\n    ++qk;\n    }\n")
