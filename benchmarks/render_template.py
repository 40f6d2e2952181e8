"""Write the candidate a template family renders, to rebuild a search's output from its family and parameters:

    python benchmarks/render_template.py FAMILY [NAME=VALUE ...] > candidate.py

VALUEs are Python literals (16, True, 'warp_shuffle'); a bare word is taken as a string. The selective scan kernel of
benchmarks/results/selective_scan-eval-best-*.json is the selective_scan.cuda.chunked family's default:

    python benchmarks/render_template.py selective_scan.cuda.chunked > scan_best.py
    ksearch eval selective_scan scan_best.py --backend mlx-cuda --baseline naive --json
"""

from __future__ import annotations

import ast
import sys
from typing import Any

from ksearch.policy.templates import render


def _value(text: str) -> Any:
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return text


def main(argv: list[str]) -> int:
    if not argv or any("=" not in a for a in argv[1:]):
        print(__doc__, file=sys.stderr)
        return 2
    params = {k: _value(v) for k, v in (a.split("=", 1) for a in argv[1:])}
    try:
        sys.stdout.write(render(argv[0], params))
    except KeyError as exc:
        print(f"error: {exc.args[0]}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
