"""The CUDA-to-MLX translation layer: knowledge as data (concepts, patterns, assertions; hardware profiles come from
ksearch.backends.profiles), the spec renderer, the CUDA analyzer and the dialect linter.

The loaders return plain dicts/lists (cached; treat them as read-only). Pattern exemplars stored as files
("@exemplars/<file>") are inlined here, so consumers always see strings.
"""

from __future__ import annotations

import copy
import functools
from pathlib import Path
from typing import Any

import yaml

from ksearch.backends.profiles import load_profiles

DATA = Path(__file__).resolve().parent / "data"
SCHEMAS = Path(__file__).resolve().parent / "schemas"


@functools.cache
def _load(name: str) -> Any:
    return yaml.safe_load((DATA / name).read_text())


def _inline(value: str) -> str:
    if value.startswith("@exemplars/") and "\n" not in value:
        return (DATA / value[1:]).read_text()
    return value


@functools.cache
def _patterns() -> tuple[dict[str, Any], ...]:
    out = []
    for p in _load("patterns.yaml")["patterns"]:
        p = copy.deepcopy(p)
        p["exemplars"] = {k: _inline(v) for k, v in (p.get("exemplars") or {}).items()}
        out.append(p)
    return tuple(out)


def load_patterns() -> list[dict[str, Any]]:
    """Optimisation patterns (data/patterns.yaml), exemplars inlined."""
    return list(_patterns())


def load_concepts() -> list[dict[str, Any]]:
    """CUDA -> Metal / MLX-CUDA concept rows (data/concepts.yaml)."""
    return list(_load("concepts.yaml")["concepts"])


def load_assertions() -> list[dict[str, Any]]:
    """Properties a correct kernel keeps (data/assertions.yaml)."""
    return list(_load("assertions.yaml")["assertions"])


def load_hardware() -> list[dict[str, Any]]:
    """Hardware profiles, as ksearch.backends.profiles loads them (backends/data/hardware.yaml)."""
    return list(load_profiles())


def by_id(rows: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {r["id"]: r for r in rows}


def patterns_for(kind: str, backend: str) -> list[dict[str, Any]]:
    """Patterns that apply to a task kind on a backend, highest prior rating first."""
    rows = [p for p in _patterns() if backend in p["backends"] and (kind in p["kinds"] or "any" in p["kinds"])]
    return sorted(rows, key=lambda p: -p["prior"]["rating_0_to_10"])


def assertions_for(kind: str) -> list[dict[str, Any]]:
    return [a for a in load_assertions() if kind in a["kinds"] or "any" in a["kinds"]]


def hardware_profile(profile_id: str) -> dict[str, Any]:
    for p in load_hardware():
        if p["id"] == profile_id:
            return p
    raise KeyError(f"no hardware profile {profile_id!r}")


__all__ = [
    "assertions_for",
    "by_id",
    "hardware_profile",
    "load_assertions",
    "load_concepts",
    "load_hardware",
    "load_patterns",
    "patterns_for",
]
