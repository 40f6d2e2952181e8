"""Which wgmma configuration beats a baseline in a `attention_wgmma_check.py` result, side by side:

    python benchmarks/wgmma_compare.py CHECK_JSON BASELINE MARGIN CANDIDATE...

Prints each correct candidate's geometric-mean TFLOP/s ratio to BASELINE over the shapes both ran (stderr), then, on
stdout, the best candidate whose ratio exceeds 1 + MARGIN, or nothing: device scripts branch on it.
"""

from __future__ import annotations

import json
import math
import sys


def ratios(result: dict, baseline: str, candidates: list[str]) -> dict[str, float]:
    out = {}
    for c in candidates:
        rows = [x for x in result.get("bench", []) if f"{c}_tflops" in x and f"{baseline}_tflops" in x]
        if c in result.get("correct", []) and rows:
            out[c] = math.exp(sum(math.log(x[f"{c}_tflops"] / x[f"{baseline}_tflops"]) for x in rows) / len(rows))
    return out


def main(argv: list[str]) -> None:
    path, baseline, margin, *candidates = argv
    with open(path) as fh:
        found = ratios(json.load(fh), baseline, candidates)
    for c, g in found.items():
        print(f"{c} vs {baseline}: {g:.3f}", file=sys.stderr)
    winners = [c for c, g in found.items() if g > 1 + float(margin)]
    print(max(winners, key=found.__getitem__) if winners else "")


if __name__ == "__main__":
    main(sys.argv[1:])
