"""How many K / V tile products a wgmma prefill configuration runs for one (batch, query head), against how many its
rows need: every consumer warpgroup of a block multiplies every tile its block's last row needs, unless `_wt` lets
each stop at its own (wgmma_ws_text.own_tiles). Counts in warpgroup-tiles (one warpgroup's S = Q K^T and O += P V on
one tile), from the same arithmetic as the kernels' BLOCK_COORDS and `_wt`'s `ctiles`. No GPU needed.

    python benchmarks/prefill_tile_count.py [CONFIG...] [--lengths 2048,4096,8192] [--json OUT.json]

CONFIG: wgmma configuration names (default: the dispatch's `WIDE`, `WIDE_PERSIST` and `TALL`); L = S.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from ksearch.kernels.attention import TALL, WIDE, WIDE_PERSIST
from ksearch.kernels.attention.wgmma_ws import config_name, parse_config


def tile_products(length: int, keys: int, causal: bool, wg: int, bn: int) -> tuple[int, int]:
    """(warpgroup-tiles run without `_wt`, warpgroup-tiles with it) for one (batch, query head): L = `length` query
    rows (a multiple of 64), S = `keys`, blocks of `wg` x 64 rows, `bn` keys a tile."""
    bm, shift = 64 * wg, keys - length
    visited = own = 0
    for m0 in range(0, length, bm):
        n_end = min(keys, m0 + bm + shift) if causal else keys
        ntiles = -(-n_end // bn)
        for w in range(wg):
            row = m0 + 64 * w
            visited += ntiles
            if row >= length:  # a warpgroup past L (a partial last block): one tile, the pipeline's least
                own += 1
            else:
                own += min(ntiles, -(-min(keys, row + 64 + shift) // bn)) if causal else ntiles
    return visited, own


def rows(names: list[str], lengths: list[int]) -> list[dict[str, Any]]:
    out = []
    for name in names:
        cfg = parse_config(name)
        for causal in (False, True):
            for length in lengths:
                visited, own = tile_products(length, length, causal, cfg.wg, cfg.bn)
                out.append({"config": name, "L": length, "S": length, "causal": causal, "tiles_visited": visited,
                            "tiles_needed": own, "saved_share": round(1 - own / visited, 4)})
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("configs", nargs="*", help="wgmma configuration names (default: WIDE, WIDE_PERSIST, TALL)")
    ap.add_argument("--lengths", default="2048,4096,8192", help="comma-separated L = S, multiples of 64")
    ap.add_argument("--json", help="write the rows here as JSON")
    args = ap.parse_args(argv)
    try:
        lengths = [int(x) for x in args.lengths.split(",") if x.strip()]
    except ValueError:
        sys.exit(f"--lengths {args.lengths!r}: give whole numbers, e.g. 2048,4096")
    if not lengths or any(n <= 0 or n % 64 for n in lengths):
        sys.exit(f"--lengths {args.lengths!r}: each a positive multiple of 64 (the kernels' warpgroup rows)")
    names = args.configs or [config_name(c) for c in (WIDE, WIDE_PERSIST, TALL)]
    try:
        table = rows(names, lengths)
    except ValueError as exc:
        sys.exit(str(exc))
    for r in table:
        print(f"{r['config']:40s} L=S={r['L']:6d} {'causal' if r['causal'] else 'full  '} "
              f"{r['tiles_visited']:7d} visited {r['tiles_needed']:7d} needed  {100 * r['saved_share']:5.1f}% saved")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"schema": "ksearch-tile-count/1", "name": "prefill-tile-count", "rows": table}, fh, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
