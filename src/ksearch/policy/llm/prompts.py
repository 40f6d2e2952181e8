"""Rendering the prompts: jinja2 templates in prompts/, and the plain-data views of the task and backend.

The templates see only plain data (dicts, strings), built here, so a template never calls into the task or the
backend, and the same inputs always render the same text (strict replay compares prompts byte for byte).
"""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import Any

from ksearch.policy.base import PolicyContext

TEMPLATES = Path(__file__).parent / "prompts"


@cache
def _env() -> Any:
    import jinja2

    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(TEMPLATES)),
        # a missing variable is a bug in the policy, not an empty prompt section
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,  # an included block ends its last line
        autoescape=False,  # prompts are plain text: escaping would corrupt code and JSON
    )
    env.filters["oneline"] = _oneline
    env.filters["clip"] = _clip
    env.globals["us"] = lambda s: "-" if s is None else f"{s * 1e6:.1f}"
    env.globals["num"] = lambda v: "-" if v is None else f"{v:.3g}"
    return env


def render(name: str, **variables: Any) -> str:
    return str(_env().get_template(name).render(**variables)).strip() + "\n"


def _oneline(text: Any, limit: int = 200) -> str:
    flat = " ".join(str(text or "").split()).replace("|", "/")
    return flat if len(flat) <= limit else flat[:limit] + "..."


def _clip(text: Any, limit: int = 4000) -> str:
    text = str(text or "")
    return text if len(text) <= limit else text[:limit] + "\n[... clipped]"


def task_view(ctx: PolicyContext) -> dict[str, Any]:
    task = ctx.task
    tier = ctx.backend.tier
    workloads = [w for w in task.workloads if w.tier == tier and w.split == "search"] or [
        w for w in task.workloads if w.split == "search"
    ]

    def tensor(t: Any) -> dict[str, Any]:
        dtype = "the workload's dtype" if t.dtype == "workload" else t.dtype
        return {"name": t.name, "shape": list(t.shape), "dtype": dtype}

    params = sorted({p for w in task.workloads for p in w.params})
    return {
        "name": task.name,
        "kind": task.kind,
        "description": task.description,
        "inputs": [tensor(t) for t in task.inputs],
        "outputs": [tensor(t) for t in task.outputs],
        # Holdout workloads stay out of prompts: they exist to catch kernels tuned to the visible shapes.
        "workloads": [
            {"name": w.name, "axes": dict(w.axes), "dtype": w.dtype, "params": dict(w.params)}
            for w in workloads
        ],
        "params": params,
        "forbidden": list(task.forbidden),
    }


def backend_view(ctx: PolicyContext) -> dict[str, Any]:
    b = ctx.backend
    try:
        profile = b.profile()
    except Exception as exc:  # a missing profile must not cost the run its prompts
        profile = {"unknown": f"no hardware profile ({type(exc).__name__})"}
    hardware = json.dumps(
        {k: v for k, v in profile.items() if v not in (None, {}, "")}, default=str, sort_keys=True
    )
    return {"name": b.name, "dialect": b.dialect, "tier": b.tier, "hardware": hardware}


def common(ctx: PolicyContext) -> dict[str, Any]:
    port = json.dumps(ctx.port_context, indent=1, default=str, sort_keys=True) if ctx.port_context else ""
    return {
        "task": task_view(ctx),
        "backend": backend_view(ctx),
        "spec": ctx.spec or "",
        "port": port,
        "round": ctx.round,
    }


def action_view(action: dict[str, Any]) -> dict[str, Any]:
    """The parts of a world-model node a code prompt needs, whatever shape the model gave it."""
    act: dict[str, Any] = action["action"] if isinstance(action.get("action"), dict) else {}
    title = (
        act.get("title")
        or action.get("choice")
        or action.get("decision")
        or action.get("node_id")
        or "action"
    )
    return {
        "title": str(title),
        "description": str(act.get("description") or action.get("choice") or ""),
        "rationale": str(act.get("rationale") or ""),
        "expected": act.get("expected_vs_baseline_factor"),
        "notes": _oneline(action.get("notes") or "", 600),
    }
