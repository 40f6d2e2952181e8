"""How many K / V tile products a wgmma prefill configuration runs for one (batch, query head), against how many its
rows need: every consumer warpgroup of a block multiplies every tile its block's last row needs, unless `_wt` lets
each stop at its own (wgmma_ws_text.own_tiles). Counts in warpgroup-tiles (one warpgroup's S = Q K^T and O += P V on
one tile), from the same arithmetic as the kernels' BLOCK_COORDS and `_wt`'s `ctiles`. With --schedule, how evenly
persistent blocks share the work items in the plain order (block b takes items b, b + G, b + 2G, ...) and in snake
order (`_sn`, wgmma_ws_text.snake_order): the busiest block's load over the mean, an item costing its tiles plus
--start tiles (the item traces measured 2.6-3.1 beyond the loop with persistent blocks), G = min(items, --sms); and
how many K / V heads a round of G items reads (their K and V in MiB at --d) and how many items read each, in the order
the configuration's items take: every head's row block a round, or with `_hs` a section of heads at a time
(wgmma_ws_text.head_sections). With `_kt` the last round's items run as parts along the keys where the kernel splits
them (wgmma_ws_tail.tail_parts), each part costing its share of the tiles, --start, and --record tiles for its record
and the merge (the H100 trace at B 1, L=4096: a block with five items and a part busy 424 us against 394 with five).
With --metal, the same count for the Metal simdgroup prefill (metal_simdgroup.py), whose simdgroups of 8 rows each
multiply every 8-key column of the block's key blocks: in simdgroup-columns (one simdgroup's S and P V on 8 keys).
No GPU needed.

    python benchmarks/prefill_tile_count.py [CONFIG...] [--lengths 2048,4096,8192] [--schedule] [--batches 1,4]
                                            [--heads 32] [--hkv 32] [--d 128] [--sms 132] [--start 3] [--record 1]
                                            [--metal]
                                            [--json OUT.json]

CONFIG: wgmma configuration names (default: the dispatch's `WIDE`, `WIDE_PERSIST` and `TALL`); L = S.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from ksearch.kernels.attention import TALL, WIDE, WIDE_PERSIST
from ksearch.kernels.attention.metal_simdgroup import BQ, block_keys
from ksearch.kernels.attention.wgmma_ws import config_name, parse_config
from ksearch.kernels.attention.wgmma_ws_tail import tail_parts


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


def metal_column_products(length: int, keys: int, causal: bool, bk: int) -> tuple[int, int]:
    """(simdgroup-columns the Metal simdgroup kernel runs, those holding a key its rows see) for one (batch, query
    head): blocks of BQ rows, simdgroups of 8, key blocks of `bk` rows up to the block's last visible key (`kend`)."""
    shift = keys - length
    visited = own = 0
    for q0 in range(0, length, BQ):
        columns = -(-(min(keys, q0 + BQ + shift) if causal else keys) // bk) * (bk // 8)
        for row in range(q0, q0 + BQ, 8):
            visited += columns
            if row < length:  # a simdgroup past L needs nothing
                own += -(-(min(keys, row + 8 + shift) if causal else keys) // 8)
    return visited, own


def metal_rows(lengths: list[int]) -> list[dict[str, Any]]:
    out = []
    for d in (64, 128):
        bk = block_keys(d)
        for causal in (False, True):
            for length in lengths:
                visited, own = metal_column_products(length, length, causal, bk)
                out.append({"config": f"metal_simdgroup_d{d}_bk{bk}", "L": length, "S": length, "causal": causal,
                            "tiles_visited": visited, "tiles_needed": own, "saved_share": round(1 - own / visited, 4)})
    return out


def section_heads(hq: int, hkv: int, blocks: int) -> int:
    """Query heads a section with `_hs`, as the kernel computes SEC: those of blocks / 4 K / V heads (at least one)."""
    return hq // hkv * max(1, blocks // 4)


def item_order(length: int, bm: int, heads: int, section: int | None = None) -> list[tuple[int, int]]:
    """(row block, batch x query head) of each work item in the persistent kernels' order: every head's longest rows
    first (ITEM_COORDS), or with `section` query heads a section, the heads a section at a time and each section's
    longest rows first (`_hs`)."""
    mt_count = -(-length // bm)
    if section is None:
        return [(mt_count - 1 - item // heads, item % heads) for item in range(mt_count * heads)]
    out = []
    for first in range(0, heads, section):
        n = min(section, heads - first)
        out += [(mt_count - 1 - r // n, first + r % n) for r in range(mt_count * n)]
    return out


def item_tiles(length: int, keys: int, causal: bool, bm: int, bn: int, heads: int,
               section: int | None = None) -> list[int]:
    """Each work item's tiles in the persistent kernels' order (item_order), for `heads` (batch x query head)
    pairs."""
    shift = keys - length
    return [-(-(min(keys, mt * bm + bm + shift) if causal else keys) // bn)
            for mt, _ in item_order(length, bm, heads, section)]


def kv_heads_a_round(order: list[tuple[int, int]], hq: int, hkv: int, blocks: int) -> float:
    """The mean number of distinct K / V heads the items of a round (`blocks` items in a row of `order`) read."""
    group = hq // hkv
    rounds = [order[i:i + blocks] for i in range(0, len(order), blocks)]
    return sum(len({bhq // hq * hkv + bhq % hq // group for _, bhq in r}) for r in rounds) / len(rounds)


def block_loads(costs: list[float], blocks: int, snake: bool) -> list[float]:
    """What each of `blocks` persistent blocks has to do, items dealt in the plain or snake order."""
    loads = [0.0] * blocks
    for item, cost in enumerate(costs):
        rnd, pos = divmod(item, blocks)
        loads[blocks - 1 - pos if snake and rnd % 2 else pos] += cost
    return loads


def busiest_over_mean(costs: list[float], blocks: int, snake: bool) -> float:
    """The most any of `blocks` persistent blocks has to do over the mean, items dealt in the plain or snake order."""
    loads = block_loads(costs, blocks, snake)
    return max(loads) / (sum(loads) / blocks)


def split_costs(costs: list[float], tiles: list[int], grid: int, causal: bool, start: float,
                record: float, parts: int | None = None) -> tuple[list[float], int, int]:
    """(each walked item's cost, last-round items, parts each) with the last round split along the keys as `_kt`
    splits it: the full rounds' items as they are, then part p of last-round item i at position p x TAIL + i, its
    share of the item's tiles as the kernel cuts them, plus `start` and `record`. `parts`: that many parts a
    last-round item wherever one splits without the mask, the parts then running over as many rounds as they take (a
    what-if: the kernel's own count never takes more than one round)."""
    full, tail, kernel_parts = tail_parts(len(costs), grid, max(tiles), causal)
    parts = min(parts, max(tiles)) if parts and tail and not causal else kernel_parts
    if parts == 1:
        return costs, tail, 1
    out = costs[:full]
    for p in range(parts):
        for i in range(tail):
            n = tiles[full + i]
            out.append((p + 1) * n // parts - p * n // parts + start + record)
    return out, tail, parts


def schedule_rows(names: list[str], lengths: list[int], batches: list[int], heads: int, sms: int,
                  start: float, hkv: int | None = None, d: int = 128, record: float = 1.0,
                  parts: int | None = None) -> list[dict[str, Any]]:
    hkv = hkv or heads
    out = []
    for name in names:
        cfg = parse_config(name)
        for b in batches:
            for causal in (False, True):
                for length in lengths:
                    bm = 64 * cfg.wg
                    grid = min(-(-length // bm) * b * heads, sms)
                    section = section_heads(heads, hkv, grid) if cfg.sections else None
                    tiles = item_tiles(length, length, causal, bm, cfg.bn, b * heads, section)
                    costs = [t + start for t in tiles]
                    tail, split = len(costs) - len(costs) // grid * grid, 1
                    if cfg.ktail:
                        costs, tail, split = split_costs(costs, tiles, grid, causal, start, record, parts)
                    kv = kv_heads_a_round(item_order(length, bm, b * heads, section), heads, hkv, grid)
                    out.append({"config": name, "B": b, "Hq": heads, "Hkv": hkv, "D": d, "L": length,
                                "causal": causal, "items": len(tiles), "walked": len(costs), "blocks": grid,
                                "start_tiles": start, "last_round_items": tail, "last_round_parts": split,
                                "busiest_tiles": round(max(block_loads(costs, grid, cfg.snake)), 1),
                                "plain_busiest_over_mean": round(busiest_over_mean(costs, grid, False), 4),
                                "snake_busiest_over_mean": round(busiest_over_mean(costs, grid, True), 4),
                                "kv_heads_a_round": round(kv, 2), "items_a_kv_head": round(grid / kv, 2),
                                "kv_mib_a_round": round(kv * 2 * length * d * 2 / 2**20, 1)})
    return out


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
    ap.add_argument("--schedule", action="store_true", help="the persistent blocks' balance, plain and snake order")
    ap.add_argument("--batches", default="1,4", help="with --schedule: batch sizes, comma-separated")
    ap.add_argument("--heads", type=int, default=32, help="with --schedule: query heads")
    ap.add_argument("--hkv", type=int, help="with --schedule: K / V heads, a divisor of --heads (default: --heads)")
    ap.add_argument("--d", type=int, default=128, help="with --schedule: head dim, for K / V's bytes (2 an element)")
    ap.add_argument("--sms", type=int, default=132, help="with --schedule: multiprocessors (the H200's 132)")
    ap.add_argument("--start", type=float, default=3.0, help="with --schedule: an item's start and end, in tiles")
    ap.add_argument("--record", type=float, default=1.0,
                    help="with --schedule and `_kt`: a part's record and the merge, in tiles")
    ap.add_argument("--parts", type=int, help="with --schedule and `_kt`: this many parts a last-round item wherever "
                    "one splits without the mask, over as many rounds as they take (a what-if; default: the kernel's)")
    ap.add_argument("--metal", action="store_true", help="the Metal simdgroup prefill's 8-key columns instead")
    ap.add_argument("--json", help="write the rows here as JSON")
    args = ap.parse_args(argv)
    try:
        lengths = [int(x) for x in args.lengths.split(",") if x.strip()]
        batches = [int(x) for x in args.batches.split(",") if x.strip()]
    except ValueError:
        sys.exit(f"--lengths {args.lengths!r} / --batches {args.batches!r}: give whole numbers, e.g. 2048,4096")
    if not batches or min(batches) < 1 or args.heads < 1 or args.sms < 1 or args.start < 0 or args.d < 1:
        sys.exit("--batches, --heads, --sms and --d take positive whole numbers, --start a number of tiles >= 0")
    if args.hkv is not None and (args.hkv < 1 or args.heads % args.hkv):
        sys.exit(f"--hkv {args.hkv}: a positive divisor of --heads ({args.heads})")
    if not lengths or any(n <= 0 or n % 64 for n in lengths):
        sys.exit(f"--lengths {args.lengths!r}: each a positive multiple of 64 (the kernels' warpgroup rows)")
    if args.metal and (args.schedule or args.configs):
        sys.exit("--metal counts the one Metal simdgroup kernel: give it without CONFIG names or --schedule")
    names = args.configs or [config_name(c) for c in (WIDE, WIDE_PERSIST, TALL)]
    try:
        table = (schedule_rows(names, lengths, batches, args.heads, args.sms, args.start, args.hkv, args.d, args.record,
                               args.parts)
                 if args.schedule
                 else metal_rows(lengths) if args.metal else rows(names, lengths))
    except ValueError as exc:
        sys.exit(str(exc))
    if args.schedule:
        for r in table:
            print(f"{r['config']:40s} B={r['B']} L={r['L']:6d} {'causal' if r['causal'] else 'full  '} "
                  f"{r['items']:6d} items on {r['blocks']:4d} blocks: busiest/mean plain "
                  f"{r['plain_busiest_over_mean']:.3f} snake {r['snake_busiest_over_mean']:.3f}; "
                  f"K / V heads a round {r['kv_heads_a_round']:6.1f} ({r['kv_mib_a_round']:.0f} MiB, "
                  f"{r['items_a_kv_head']:.1f} items each)"
                  + f"; busiest {r['busiest_tiles']:.0f} tiles"
                  + (f"; last round {r['last_round_items']} items x {r['last_round_parts']} parts"
                     if r["last_round_parts"] > 1 else ""))
        table_name = "prefill-item-schedule"
    else:
        table_name = "prefill-metal-column-count" if args.metal else "prefill-tile-count"
    for r in table if not args.schedule else []:
        print(f"{r['config']:40s} L=S={r['L']:6d} {'causal' if r['causal'] else 'full  '} "
              f"{r['tiles_visited']:7d} visited {r['tiles_needed']:7d} needed  {100 * r['saved_share']:5.1f}% saved")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"schema": "ksearch-tile-count/1", "name": table_name, "rows": table}, fh, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
