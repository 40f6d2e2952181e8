"""The one schema for every benchmark result in the project (benchmarks/results/*.json): make_result, write_result.

{
  "schema": "ksearch-bench/1",
  "name": "attention-prefill",            # what was measured
  "date": "2026-11-29T20:00:00Z",
  "device": "NVIDIA H200", "driver": "580.159.04", "mlx": "0.32.4", "ksearch": "0.1.0",
  "backend": "mlx-cuda", "python": "3.12.3", "platform": "...",
  "shapes": [...], "dtypes": [...],          # what the figures cover
  "figures": [ {...}, ... ],                 # one row per measured configuration: free-form keys, numbers in SI
                                             # units with the unit in the key (latency_s, tok_per_s, tflops, gbs, ratio)
  "summary": {...},                          # headline numbers (e.g. geomean ratios)
  "notes": "..."
}
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from ksearch.backends import Backend, environment

SCHEMA = "ksearch-bench/1"
REQUIRED = ("schema", "name", "date", "device", "mlx", "backend", "shapes", "dtypes", "figures")


def make_result(name: str, backend: Backend, figures: list[dict[str, Any]], shapes: list[Any], dtypes: list[str],
                summary: dict[str, Any] | None = None, notes: str = "") -> dict[str, Any]:
    env = environment(backend)
    return {
        "schema": SCHEMA,
        "name": name,
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "device": env.get("device"),
        "driver": env.get("driver"),
        "mlx": env.get("mlx"),
        "ksearch": env.get("ksearch"),
        "backend": backend.name,
        "python": env.get("python"),
        "platform": env.get("platform"),
        "shapes": shapes,
        "dtypes": dtypes,
        "figures": figures,
        "summary": summary or {},
        "notes": notes,
    } | ({"timing": env["timing"], "notes": f"{env['timing']}. {notes}".strip()} if env.get("timing") else {})


def validate(data: dict[str, Any]) -> None:
    missing = [k for k in REQUIRED if k not in data]
    if missing or data.get("schema") != SCHEMA:
        raise ValueError(f"not a {SCHEMA} result: missing {', '.join(missing) or 'schema tag'}")
    if not isinstance(data["figures"], list):
        raise ValueError("figures must be a list of rows")


def merged_parts(parts: list[dict[str, Any]], what: str) -> dict[str, Any]:
    """The frame of one result joined from parts measured on one machine, anywhere (the machine's facts come from
    the parts, not from where they are joined): the first part with the latest date and every part's figures."""
    if not parts:
        raise SystemExit(f"{what}: no parts to join")
    machines = {(p.get("device"), p.get("backend"), p.get("mlx")) for p in parts}
    if len(machines) != 1:
        raise SystemExit(f"{what}: the parts come from different machines or versions: {sorted(machines, key=str)}")
    return {**parts[0], "date": max(p["date"] for p in parts), "figures": [r for p in parts for r in p["figures"]]}


def write_result(data: dict[str, Any], out_dir: str | Path = "benchmarks/results", stem: str | None = None) -> Path:
    validate(data)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    safe_dev = "".join(c if c.isalnum() else "-" for c in str(data.get("device") or "unknown")).strip("-").lower()
    path = out / f"{stem or data['name']}-{data['backend']}-{safe_dev}.json"
    path.write_text(json.dumps(data, indent=2, default=str) + "\n")
    return path
