"""A dispatch rule read off one `ksearch bench attention --configs` file: the geomean of cuDNN's time over ours that
the dispatch would reach if the shapes a rule names took a configuration measured in the same rounds, over the whole
set, at D=128 from L=4096 and at D=64, beside the dispatch as measured. Each shape takes the first rule that matches
it; a shape no rule matches, or whose named configuration ran MLX's attention there (it does not fit), keeps the
dispatch's own figure. No GPU needed.

    python benchmarks/prefill_rule.py FILE.json --take 'D=128,mask:CONFIG' [--take 'D=64:CONFIG' ...]

A rule is TERMS:CONFIG, TERMS comma-separated among D=64, D=128, mask, no-mask, L<4096, L>=4096, B=1, B=4, L=2048,
L=4096, L=8192 (all must hold).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ksearch.bench.timing import geomean

Row = dict[str, Any]
TERMS: dict[str, Callable[[Row], bool]] = {
    "D=64": lambda r: r["D"] == 64, "D=128": lambda r: r["D"] == 128,
    "mask": lambda r: bool(r["causal"]), "no-mask": lambda r: not r["causal"],
    "L<4096": lambda r: r["L"] < 4096, "L>=4096": lambda r: r["L"] >= 4096,
    "B=1": lambda r: r["B"] == 1, "B=4": lambda r: r["B"] == 4,
    "L=2048": lambda r: r["L"] == 2048, "L=4096": lambda r: r["L"] == 4096, "L=8192": lambda r: r["L"] == 8192,
}


def parse_rule(text: str) -> tuple[list[str], str]:
    """'D=128,mask:CONFIG' -> (['D=128', 'mask'], 'CONFIG'); ValueError in one line for anything else."""
    terms, sep, config = text.rpartition(":")
    names = [t.strip() for t in terms.split(",") if t.strip()]
    if not sep or not config.strip() or not names:
        raise ValueError(f"--take {text!r}: write TERMS:CONFIG, e.g. 'D=128,mask:ws3_n64_s4_p4_tmas_pst_preg32_cr'")
    unknown = [t for t in names if t not in TERMS]
    if unknown:
        raise ValueError(f"--take {text!r}: unknown term {unknown[0]!r}; use {', '.join(TERMS)}")
    return names, config.strip()


def compose(rows: list[Row], rules: list[tuple[list[str], str]]) -> dict[str, Any]:
    """The rule's figure per shape, and its geomeans beside the dispatch's; ValueError names a configuration the
    file did not time."""
    timed = {name for r in rows for name in r.get("configs", {})}
    for _, config in rules:
        if config not in timed:
            raise ValueError(f"{config!r} was not timed in this file; it timed {', '.join(sorted(timed)) or 'none'}")
    chosen, taken = [], {config: 0 for _, config in rules}
    for r in rows:
        figure = r["speedup"]
        for terms, config in rules:
            if all(TERMS[t](r) for t in terms):
                named = r["configs"][config]
                if named["kernel"] != "native":
                    figure = named["speedup"]
                    taken[config] += 1
                break
        chosen.append(figure)

    def summary(figures: list[float]) -> dict[str, float]:
        pick = {"all": [True] * len(rows), "D=128, L >= 4096": [r["D"] == 128 and r["L"] >= 4096 for r in rows],
                "D=64": [r["D"] == 64 for r in rows]}
        return {k: geomean([f for f, keep in zip(figures, mask, strict=True) if keep])
                for k, mask in pick.items() if any(mask)}

    return {"rule": summary(chosen), "dispatch": summary([r["speedup"] for r in rows]), "shapes_taken": taken}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("file", help="an attention-prefill-configs-*.json written by `ksearch bench attention --configs`")
    ap.add_argument("--take", action="append", default=[], metavar="TERMS:CONFIG", required=True)
    args = ap.parse_args(argv)
    try:
        rows = json.loads(Path(args.file).read_text())["figures"]
        out = compose(rows, [parse_rule(t) for t in args.take])
    except (OSError, KeyError, TypeError, json.JSONDecodeError) as exc:
        print(f"prefill_rule: {args.file} is not a `bench attention --configs` result ({exc!r})", file=sys.stderr)
        return 2
    except ValueError as exc:
        print(f"prefill_rule: {exc}", file=sys.stderr)
        return 2
    for side in ("dispatch", "rule"):
        print(f"{side:>8}: " + ", ".join(f"{k} {v:.3f}x" for k, v in out[side].items()))
    print("shapes taken: " + ", ".join(f"{k} {v}" for k, v in out["shapes_taken"].items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
