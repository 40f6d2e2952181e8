"""The registry of template families. Each module listed here exports FAMILIES: list[TemplateFamily]."""

from __future__ import annotations

import importlib
import importlib.util

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
    return [f for f in all_families() if task in f.tasks and backend in f.backends]


__all__ = ["TemplateFamily", "all_families", "families_for"]
