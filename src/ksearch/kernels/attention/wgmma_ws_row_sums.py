"""P's row sums with one product a tile (`_r1`): the consumer adds its P values of a tile's 16-key blocks together in
fp32 before they are packed, and one `m64n8k16` against the tile of ones takes the row sums, instead of one a 16
keys (four a tile at 64 keys, eight at 128).

Why: the row sums' small products are not free on the tensor cores. With nothing but a tile's products in a loop
(`python benchmarks/wgmma_tile_ceiling.py`, H100), the library's D=128 tile of three warpgroups and 64 keys took 1,330
cycles with the four `m64n8k16` a warpgroup and 1,153 without: 13% of the tensor cores' time for 0.8% of the FLOP.
One product a tile keeps the row sums on the tensor cores, and with them what holds ptxas's wait on P V after the
softmax (an HGMMA that consumes the softmax's results; wgmma.pipeline), at a quarter of that cost.

The sums: element e (0-7) of a lane's A fragment of 16 keys is the same row and key offset in every 16-key block, so
the fragment's element e summed over the blocks, rounded once to T, is that row's share of the sum: a lane adds
BN / 16 values of each of its 8 elements (24 FADD a tile at 64 keys). The normaliser then divides by sums of rounded
partial sums where the numerator multiplies each P rounded: at most T's rounding of a sum of BN / 16 values apart,
as each P is from the fp32 value it stands for.

Measured on an H100 (docs/kernels-attention.md, "Measured on one H100"): at D=128 (three warpgroups, 64 keys) 2.7%
faster without the mask and level with it, the dispatch's there; with two warpgroups on 128 keys (`TALL`, eight sums a
lane) 1-4.5% slower, where it stays a named option.
"""

from __future__ import annotations

from ksearch.kernels.attention.wgmma_ws_text import swap_once

_BUFFERS = "    unsigned pa[2][BN / 16][4];  // P of two tiles: one in flight in O += P V while the next is packed"
_SUM_BUFFER = "\n    unsigned psum[4];  // `_r1`: the row sums' one A fragment a tile"
_PACK = "    auto pack_p = [&](unsigned (&p)[BN / 16][4]) {\n"
_PACK_SUMMED = _PACK + """      {  // `_r1`: element e of each 16-key block summed in fp32, packed once
        float se[8];
        #pragma unroll
        for (int e = 0; e < 8; ++e) {
          se[e] = s[e];
          #pragma unroll
          for (int kk = 1; kk < BN / 16; ++kk) se[e] += s[8 * kk + e];
        }
        #pragma unroll
        for (int c = 0; c < 4; ++c) psum[c] = ks_pack2<T>(se[2 * c], se[2 * c + 1]);
      }
"""
_SUMS = ("      #pragma unroll\n"
         "      for (int kk = 0; kk < BN / 16; ++kk) KsWg<T>::rs8(lacc, p[kk], d1);\n")
_SUM_ONCE = "      KsWg<T>::rs8(lacc, psum, d1);  // `_r1`: one product a tile\n"
_PIN = "      ks_fence_u<BN / 4>(&p[0][0]);\n"


def row_sums_once(text: str) -> str:
    """A wgmma prefill kernel's `text` with `_r1`: P's row sums by one `m64n8k16` a tile, on fp32 sums of its 16-key
    blocks (tests/test_prefill_row_sums.py checks the fragment arithmetic on the host)."""
    what = "_r1 (one row-sum product a tile)"
    text = swap_once(text, _BUFFERS, _BUFFERS + _SUM_BUFFER, what=what)
    text = swap_once(text, _PACK, _PACK_SUMMED, what=what)
    text = swap_once(text, _PIN, _PIN + "      ks_fence_u<4>(psum);\n", what=what)
    return swap_once(text, _SUMS, _SUM_ONCE, what=what)
