"""The registry of template families. Each module listed here exports FAMILIES: list[TemplateFamily]."""

from __future__ import annotations

import importlib
import importlib.util
from typing import Any

from ksearch.backends import code_backend
from ksearch.policy.templates.base import TemplateFamily

MODULES = (
    "ksearch.policy.templates.cpu_ops",
    "ksearch.policy.templates.reductions_gpu",
    "ksearch.policy.templates.selective_scan",
    "ksearch.policy.templates.attention",
    "ksearch.policy.templates.gqa_decode",
)


def all_families() -> list[TemplateFamily]:
    out: list[TemplateFamily] = []
    for name in MODULES:
        if importlib.util.find_spec(name) is not None:
            out.extend(importlib.import_module(name).FAMILIES)
    return out


def families_for(task: str, backend: str) -> list[TemplateFamily]:
    """The families for `task` on `backend` (an emulation takes the families of the backend it emulates)."""
    backend = code_backend(backend)
    return [f for f in all_families() if task in f.tasks and backend in f.backends]


def render(family_id: str, params: dict[str, Any] | None = None) -> str:
    """The candidate source `family_id` renders at its defaults overridden by `params`: a search's output rebuilt from
    its family id and parameters (a run records both per candidate), e.g. render("selective_scan.cuda.chunked"), the
    scan kernel the offline search found best (benchmarks/render_template.py writes it to a file)."""
    fam = next((f for f in all_families() if f.id == family_id), None)
    if fam is None:
        raise KeyError(f"no template family {family_id!r}; one of {', '.join(f.id for f in all_families())}")
    unknown = sorted(set(params or {}) - set(fam.params))
    if unknown:
        raise KeyError(f"{family_id} has no parameter {unknown[0]!r}; its parameters: {', '.join(fam.params)}")
    return fam.source(dict(params or {}))


__all__ = ["TemplateFamily", "all_families", "families_for", "render"]
