"""Two sets of `ksearch bench attention` files compared shape by shape: a change's effect across processes beside the
drift of what it left alone. Each set is one or more processes' files of the same shapes (a shape's latency in a
set: the geometric mean over its files); per group, the geomean over its shapes of the base set's latency over the
change set's, for our kernels and for cuDNN. Above 1: faster in the change set. A group whose kernels the change did
not touch shows the drift between the sets (the machine, the processes); cuDNN's column shows it for every group.
No GPU needed.

    python benchmarks/prefill_set_drift.py --base A.json [A2.json ...] --change B.json [B2.json ...] [--by-length]

Groups: head dim, mask, L < 4096 or L >= 4096 (the targets' split), or each length with --by-length. A kernel column
says whether the groups' kernels differ between the sets (their names, as the files record them).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from ksearch.bench.timing import geomean

Key = tuple[Any, ...]
SHAPE = ("B", "Hq", "Hkv", "D", "L", "S", "dtype", "causal")


def load_set(paths: list[str]) -> dict[Key, list[dict[str, Any]]]:
    """Shape -> its rows, one a file; ValueError in one line for a file that is not a prefill result or a set whose
    files time different shapes."""
    rows: dict[Key, list[dict[str, Any]]] = {}
    shapes: set[Key] | None = None
    for path in paths:
        try:
            figures = json.loads(Path(path).read_text())["figures"]
            keyed = {tuple(f[k] for k in SHAPE): f for f in figures}
            missing = next((k for f in figures for k in ("latency_s", "native_latency_s") if k not in f), None)
            if missing:
                raise KeyError(missing)
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise ValueError(f"{path}: not a `ksearch bench attention` result ({exc.__class__.__name__}: {exc}); "
                             "pass the JSON files it writes") from None
        if shapes is not None and set(keyed) != shapes:
            raise ValueError(f"{path} times other shapes than the set's first file; a set is one command's processes")
        shapes = set(keyed)
        for key, row in keyed.items():
            rows.setdefault(key, []).append(row)
    return rows


def group_of(key: Key, by_length: bool) -> tuple[int, bool, Any]:
    shape = dict(zip(SHAPE, key, strict=True))
    return shape["D"], bool(shape["causal"]), shape["L"] if by_length else shape["L"] >= 4096


def label(group: tuple[int, bool, Any], by_length: bool) -> str:
    d, causal, length = group
    where = f"L={length}" if by_length else ("L >= 4096" if length else "L < 4096")
    return f"D={d}, {'mask' if causal else 'no mask'}, {where}"


def compare(base: dict[Key, list[dict[str, Any]]], change: dict[Key, list[dict[str, Any]]],
            by_length: bool = False) -> list[dict[str, Any]]:
    """Per group: shapes, our speed in the change set over the base's, cuDNN's, and whether the kernels differ."""
    if set(base) != set(change):
        raise ValueError("the two sets time different shapes; compare runs of the same command")

    def mean_latency(rows: list[dict[str, Any]], field: str) -> float:
        return geomean([r[field] for r in rows])

    groups: dict[tuple[int, bool, Any], list[Key]] = {}
    for key in base:
        groups.setdefault(group_of(key, by_length), []).append(key)
    out = []
    for group in sorted(groups):
        keys = groups[group]
        kernels = ({r.get("kernel") for k in keys for r in base[k]}, {r.get("kernel") for k in keys for r in change[k]})
        out.append({"group": label(group, by_length), "shapes": len(keys),
                    "ours": geomean([mean_latency(base[k], "latency_s") / mean_latency(change[k], "latency_s")
                                     for k in keys]),
                    "cudnn": geomean([mean_latency(base[k], "native_latency_s")
                                      / mean_latency(change[k], "native_latency_s") for k in keys]),
                    "kernels_differ": kernels[0] != kernels[1]})
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--base", nargs="+", required=True, help="the reference set's files")
    parser.add_argument("--change", nargs="+", required=True, help="the changed set's files")
    parser.add_argument("--by-length", action="store_true", help="a group a length instead of the targets' split")
    args = parser.parse_args(argv)
    try:
        rows = compare(load_set(args.base), load_set(args.change), args.by_length)
    except ValueError as exc:
        print(f"prefill_set_drift: {exc}", file=sys.stderr)
        return 2
    print(f"{'group':28} {'shapes':>6} {'ours':>7} {'cuDNN':>7}  kernels")
    for r in rows:
        print(f"{r['group']:28} {r['shapes']:6d} {r['ours']:7.3f} {r['cudnn']:7.3f}  "
              f"{'differ' if r['kernels_differ'] else 'same'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
