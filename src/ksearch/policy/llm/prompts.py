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
from ksearch.worldmodel import ANALYSIS_HEADING
from ksearch.worldmodel.counters import counters_line

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


# -- the world model as prompts show it ------------------------------------------------------------------------------


def wm_nodes(wm: dict[str, Any]) -> list[dict[str, Any]]:
    nodes = (wm.get("decision_tree") or {}).get("nodes") or []
    if isinstance(nodes, dict):  # some writers key nodes by id
        nodes = list(nodes.values())
    return [n for n in nodes if isinstance(n, dict)]


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _title(n: dict[str, Any]) -> str:
    act = _dict(n.get("action"))
    return str(act.get("title") or n.get("choice") or n.get("decision") or n.get("node_id") or "?")


def _outcome(n: dict[str, Any]) -> str:
    """How a node went, in a few words: its solution's score, or its state in the search."""
    ref = _dict(n.get("solution_ref"))
    if ref.get("solution_id"):
        score = _dict(ref.get("eval")).get("score")
        return f"solved, score {score:.4g}" if isinstance(score, int | float) else "solved"
    status = _dict(n.get("ksearch")).get("status")
    if status in ("too_hard", "closed"):
        lines = [ln for ln in str(n.get("notes") or "").splitlines() if ln.startswith(("TOO_HARD", "CLOSED"))]
        why = lines[-1].split(":", 1)[-1].strip() if lines else ""
        return ("too hard" if status == "too_hard" else "closed") + (f" ({why})" if why else "")
    return "not tried yet"


def without_analysis(notes: Any) -> str:
    """Root notes without the analysis block (prompts that show the analysis do so in a section of its own)."""
    text = str(notes or "")
    marker = f"{ANALYSIS_HEADING}:"
    return text[: text.index(marker)].rstrip() if marker in text else text


def world_model_view(wm: dict[str, Any] | None, node_id: str) -> dict[str, Any] | None:
    """The compact world model a code prompt shows around an action, as K-Search injects it: the kernel summary, the
    path from the root to the action (each step with its outcome and notes), the action's alternatives (its
    siblings) and how they went, and the open questions."""
    if not wm:
        return None
    nodes = wm_nodes(wm)
    by_id = {str(n.get("node_id")): n for n in nodes}
    if node_id not in by_id:
        return None
    path, seen, cur = [], set(), by_id.get(node_id)
    while cur is not None and str(cur.get("node_id")) not in seen:
        seen.add(str(cur.get("node_id")))
        path.append(cur)
        cur = by_id.get(str(cur.get("parent_id"))) if cur.get("parent_id") is not None else None
    path.reverse()
    steps = []
    for n in path:
        nid = str(n.get("node_id"))
        is_root = n.get("parent_id") is None
        steps.append({"node_id": nid, "title": "the starting kernel" if is_root else _title(n),
                      "outcome": "" if is_root or nid == node_id else _outcome(n),
                      "notes": _oneline(without_analysis(n.get("notes")) if is_root else n.get("notes"), 400),
                      "this": nid == node_id})
    parent = by_id[node_id].get("parent_id")
    siblings = [{"node_id": str(n.get("node_id")), "title": _title(n), "outcome": _outcome(n)}
                for n in nodes if n.get("parent_id") == parent and str(n.get("node_id")) != node_id
                and isinstance(n.get("action"), dict)]
    raw_questions = wm.get("open_questions")
    questions: list[Any] = raw_questions if isinstance(raw_questions, list) else []
    return {"summary": _oneline(wm.get("kernel_summary"), 600), "path": steps, "siblings": siblings[:8],
            "open_questions": [_oneline(q, 200) for q in questions[:6]]}


def edit_json(wm: dict[str, Any], compact: bool = False) -> str:
    """The world model as an edit prompt quotes it: whole, but for the analysis in the root's notes (shown apart);
    `compact`: on one line, for a small context."""
    data = json.loads(json.dumps(wm, default=str))
    for n in wm_nodes(data):
        # A measured node's counters in one line, its rules by name; the proposer's superseded guess left out.
        if isinstance(n.get("counters"), dict):
            n["counters"] = counters_line(n["counters"])
        if isinstance(n.get("counter_rules"), list):
            n["counter_rules"] = [f"{r.get('rule')}: {r.get('says')}" for r in n["counter_rules"] if isinstance(r, dict)]
        n.pop("impacts_guessed", None)
        if n.get("parent_id") is None and n.get("notes"):
            n["notes"] = without_analysis(n["notes"]) + ("\n(the analysis is quoted above)"
                                                          if f"{ANALYSIS_HEADING}:" in str(n["notes"]) else "")
    if compact:
        return json.dumps(data, separators=(",", ":"), sort_keys=True, default=str)
    return json.dumps(data, indent=1, sort_keys=True, default=str)


def frontier_view(wm: dict[str, Any]) -> list[dict[str, Any]]:
    """The actions ready to try (the published frontier rule, our too-hard and closed states left out)."""
    nodes = wm_nodes(wm)
    by_id = {str(n.get("node_id")): n for n in nodes}
    out = []
    for n in nodes:
        parent = by_id.get(str(n.get("parent_id")))
        ref = _dict(n.get("solution_ref"))
        if not isinstance(n.get("action"), dict) or ref.get("solution_id") or parent is None:
            continue
        if _outcome(n) != "not tried yet":
            continue
        pref = _dict(parent.get("solution_ref"))
        if parent.get("parent_id") is not None and not pref.get("solution_id"):
            continue
        act = n["action"]
        out.append({"node_id": str(n.get("node_id")), "parent_id": str(n.get("parent_id")), "title": _title(n),
                    "score": act.get("score_0_to_1"), "difficulty": act.get("difficulty_1_to_5"),
                    "rating": n.get("overall_rating_0_to_10")})
    return out
