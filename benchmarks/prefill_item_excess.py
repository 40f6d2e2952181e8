"""How much longer than cuDNN's our prefill work items are, read off `ksearch bench attention --full` files: for each
head dim, mask and length, the geomean S of cuDNN's time over ours (over every shape of the files) and the tiles T an
item of the dispatch's kernel runs on average there. If both kernels ran a tile at the same rate and an item cost a
fixed time beyond its tiles (o for ours, c for cuDNN's, in our tiles), S would be (T + c) / (T + o); (1 - S) x T is
then o - c, the excess an item. An excess that stays level across lengths is a cost of each item; one that grows
with the length is a cost of each tile. No GPU needed.

    python benchmarks/prefill_item_excess.py FILE.json [FILE.json ...] [--config NAME] [--json OUT.json]

--config: a configuration a `--configs` file timed beside the dispatch, in its place.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from prefill_tile_count import item_tiles

from ksearch.bench.timing import geomean
from ksearch.kernels.attention.wgmma_ws import parse_config

Row = dict[str, Any]


def mean_item_tiles(kernel: str, length: int, causal: bool) -> float | None:
    """The tiles an item of `kernel` runs on average at L = S = `length` (None for a kernel not of the wgmma family,
    e.g. MLX's own where nothing fits)."""
    try:
        cfg = parse_config(kernel)
    except ValueError:
        return None
    tiles = item_tiles(length, length, causal, 64 * cfg.wg, cfg.bn, 1)
    return sum(tiles) / len(tiles)


def excess(rows: list[Row]) -> list[dict[str, Any]]:
    """One line per head dim, mask and length: shapes, the dispatch's kernels, S, T and (1 - S) x T."""
    groups: dict[tuple[int, bool, int], list[Row]] = {}
    for r in rows:
        groups.setdefault((r["D"], bool(r["causal"]), r["L"]), []).append(r)
    out = []
    for (d, causal, length), rs in sorted(groups.items()):
        s = geomean([r["speedup"] for r in rs])
        kernels = sorted({str(r.get("kernel", "")) for r in rs})
        counts = [t for k in kernels if (t := mean_item_tiles(k, length, causal)) is not None]
        line: dict[str, Any] = {"D": d, "causal": causal, "L": length, "shapes": len(rs), "kernels": kernels,
                                "speedup": s}
        if len(kernels) == 1 and counts:  # one kernel of the family throughout: its items' tiles are the scale
            line["tiles_an_item"] = counts[0]
            line["excess_tiles"] = (1 - s) * counts[0]
        out.append(line)
    return out


def load(paths: list[str], config: str | None = None) -> list[Row]:
    """Every shape's row of the files, the dispatch's figures or `config`'s; ValueError in one line for a file that is
    not a bench attention result or did not time `config`."""
    rows: list[Row] = []
    for p in paths:
        try:
            figures = json.loads(Path(p).read_text())["figures"]
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise ValueError(f"{p}: not a `ksearch bench attention` result ({type(exc).__name__}: {exc})") from None
        for f in figures:
            try:
                named = f["configs"][config] if config else f
                rows.append({"D": f["D"], "causal": f["causal"], "L": f["L"], "speedup": named["speedup"],
                             "kernel": named.get("kernel")})
            except (KeyError, TypeError) as exc:
                what = (f"timed no {config!r} (a `--configs` file names it)" if config
                        else "not a `ksearch bench attention` result")
                raise ValueError(f"{p}: {what} ({type(exc).__name__}: {exc})") from None
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("files", nargs="+", help="attention-prefill-*.json written by `ksearch bench attention --full`")
    ap.add_argument("--config", help="a configuration timed beside the dispatch (`bench attention --configs`)")
    ap.add_argument("--json", type=Path, help="write the lines here too")
    args = ap.parse_args(argv)
    try:
        lines = excess(load(args.files, args.config))
    except ValueError as exc:
        print(f"prefill_item_excess: {exc}", file=sys.stderr)
        return 2
    print(f"{'D':>4} {'mask':>5} {'L':>6} {'shapes':>6} {'S':>7} {'tiles':>7} {'excess':>7}  kernel")
    for x in lines:
        tiles = f"{x['tiles_an_item']:7.1f}" if "tiles_an_item" in x else f"{'-':>7}"
        ex = f"{x['excess_tiles']:7.2f}" if "excess_tiles" in x else f"{'-':>7}"
        print(f"{x['D']:>4} {('yes' if x['causal'] else 'no'):>5} {x['L']:>6} {x['shapes']:>6} {x['speedup']:7.3f} "
              f"{tiles} {ex}  {', '.join(x['kernels'])}")
    if args.json:
        args.json.write_text(json.dumps(lines, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
