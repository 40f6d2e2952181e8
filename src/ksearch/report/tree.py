"""The world-model tree as nested HTML (one `.wm-node` element per node) and as a rich Tree for the terminal.

An indented tree, not a drawn graph: K-Search trees are narrow and deep with long action titles and notes, which read
better as text than as boxes on a canvas, and nested lists need no layout code or JavaScript.
"""

from __future__ import annotations

import json
from html import escape
from typing import Any

from rich.tree import Tree

from ksearch.report.rundata import action_title, node_eval, solution_id, wm_nodes

FAILED = {"compile_error", "runtime_error", "timeout", "wrong_shape", "wrong_answer", "forbidden"}


def children_map(nodes: list[dict[str, Any]], root_id: Any = None) -> tuple[list[str], dict[str, list[str]]]:
    """Roots and children by node id. Nodes whose parent is unknown become roots, so that none is ever dropped."""
    ids = [str(n.get("node_id")) for n in nodes]
    known = set(ids)
    kids: dict[str, list[str]] = {i: [] for i in ids}
    roots: list[str] = []
    for n, nid in zip(nodes, ids, strict=True):
        parent = n.get("parent_id")
        if parent is not None and str(parent) in known and str(parent) != nid:
            kids[str(parent)].append(nid)
        else:
            roots.append(nid)
    if root_id is not None and str(root_id) in roots:  # the declared root first
        roots.remove(str(root_id))
        roots.insert(0, str(root_id))
    return roots, kids


def node_class(node: dict[str, Any]) -> str:
    status, _ = node_eval(node)
    if node.get("parent_id") is None and not solution_id(node):
        return "root"
    if status == "passed":
        return "passed"
    if status in FAILED:
        return "failed"
    return "solved" if solution_id(node) else "open"


def node_fill(node: dict[str, Any], best_score: float) -> str:
    """Background: green deepening with the score relative to the best; red for failures; grey for open ideas."""
    status, score = node_eval(node)
    if status == "passed" and score is not None and best_score > 0:
        frac = max(0.0, min(1.0, score / best_score))
        return f"hsl(125, 45%, {92 - 30 * frac:.0f}%)"
    if status in FAILED:
        return "hsl(0, 70%, 92%)"
    return "#f5f5f5"


def _loop_status(node: dict[str, Any]) -> str | None:
    """The loop's own bookkeeping (open, expanded, too_hard, ...) kept under the node's "ksearch" key."""
    extra = node.get("ksearch")
    return str(extra["status"]) if isinstance(extra, dict) and extra.get("status") else None


def _fmt(v: Any, spec: str) -> str | None:
    return format(v, spec) if isinstance(v, int | float) else None


def _notes_text(notes: Any) -> str:
    if notes is None or notes == "":
        return ""
    return notes if isinstance(notes, str) else json.dumps(notes, indent=1, default=str)


def _node_html(node: dict[str, Any], best_ids: set[str], best_score: float) -> str:
    nid = str(node.get("node_id"))
    status, score = node_eval(node)
    raw_action = node.get("action")
    action: dict[str, Any] = raw_action if isinstance(raw_action, dict) else {}
    klass = node_class(node)
    on_path = nid in best_ids
    facts = [f"<code>{escape(nid)}</code>"]
    for label, value in (("rating", _fmt(node.get("overall_rating_0_to_10"), ".1f")),
                         ("confidence", _fmt(node.get("confidence_0_to_1"), ".2f")),
                         ("difficulty", _fmt(action.get("difficulty_1_to_5"), "d")),
                         ("expected", _fmt(action.get("expected_vs_baseline_factor"), ".2f"))):
        if value is not None:
            facts.append(f"{label} <b>{value}{'/10' if label == 'rating' else ''}</b>")
    sid = solution_id(node)
    if sid:
        facts.append(f"solution <code>{escape(sid)}</code>")
    loop_status = _loop_status(node)
    if loop_status:
        facts.append(f"search: <b>{escape(loop_status.replace('_', ' '))}</b>")
    badge = escape((status or {"open": "open", "root": "root"}.get(klass, "attached")).replace("_", " "))
    score_html = f'<span class="wm-score">{score:.3f}</span>' if score is not None and status == "passed" else ""
    parts = [
        f'<div class="wm-node {klass}{" best-path" if on_path else ""}" data-node-id="{escape(nid)}" '
        f'data-status="{escape(status or klass)}" style="background:{node_fill(node, best_score)}">',
        f'<div class="wm-head"><span class="badge {klass}">{badge}</span> '
        f'<span class="wm-title">{escape(action_title(node) or "(no action)")}</span>{score_html}'
        f'{" <span class=best-mark>★ best path</span>" if on_path else ""}</div>',
        f'<div class="wm-facts">{" · ".join(facts)}</div>',
    ]
    if action.get("description"):
        parts.append(f'<div class="wm-desc">{escape(str(action["description"]))}</div>')
    details = []
    notes = _notes_text(node.get("notes"))
    if notes:
        details.append(f"<div><b>notes</b><pre>{escape(notes)}</pre></div>")
    if action.get("rationale"):
        details.append(f"<div><b>rationale</b><pre>{escape(str(action['rationale']))}</pre></div>")
    impacts = node.get("impacts")
    if isinstance(impacts, dict) and impacts:
        rows = "".join(
            f"<tr><td>{escape(str(k).replace('_', ' '))}</td><td>{escape(str(v.get('rating_0_to_10', '')))}</td>"
            f"<td>{escape(str(v.get('risk', '')))}</td><td>{escape(str(v.get('notes', '')))}</td></tr>"
            for k, v in impacts.items() if isinstance(v, dict))
        details.append(f"<table class='impacts'><tr><th>impact</th><th>rating</th><th>risk</th><th>notes</th></tr>"
                       f"{rows}</table>")
    if details:
        parts.append(f"<details{' open' if on_path else ''}><summary>notes and ratings</summary>"
                     f"{''.join(details)}</details>")
    parts.append("</div>")
    return "".join(parts)


def tree_html(wm: dict[str, Any] | None, best_path_ids: list[str], best_score: float) -> str:
    if not wm:
        return '<p class="muted">No world-model snapshot in this run.</p>'
    nodes = wm_nodes(wm)
    if not nodes:
        return '<p class="muted">The world model has no nodes.</p>'
    by_id = {str(n.get("node_id")): n for n in nodes}
    tree = wm.get("decision_tree") or {}
    roots, kids = children_map(nodes, tree.get("root_id"))
    best_ids = set(best_path_ids)
    seen: set[str] = set()

    def render(nid: str) -> str:
        if nid in seen:  # ids repeated in a hand-edited snapshot: draw the first, never loop
            return ""
        seen.add(nid)
        inner = "".join(render(k) for k in kids.get(nid, []))
        sub = f"<ul>{inner}</ul>" if inner else ""
        return f"<li>{_node_html(by_id[nid], best_ids, best_score)}{sub}</li>"

    body = "".join(render(r) for r in roots)
    # Nodes left unseen sit in a cycle (a -> b -> a): show them flat rather than lose them.
    rest = []
    for n in nodes:
        if str(n.get("node_id")) not in seen:
            seen.add(str(n.get("node_id")))
            rest.append(f"<li>{_node_html(n, best_ids, best_score)}</li>")
    body += "".join(rest)
    return f'<ul class="wm-tree">{body}</ul>'


def rich_tree(wm: dict[str, Any] | None, best_path_ids: list[str], max_nodes: int = 60) -> Tree | None:
    """A compact terminal tree: status and score per node, the best path in bold."""
    if not wm or not wm_nodes(wm):
        return None
    nodes = wm_nodes(wm)
    by_id = {str(n.get("node_id")): n for n in nodes}
    roots, kids = children_map(nodes, (wm.get("decision_tree") or {}).get("root_id"))
    best_ids = set(best_path_ids)
    top = Tree("[b]world model[/b]")
    count = 0
    seen: set[str] = set()

    def add(parent: Tree, nid: str) -> None:
        nonlocal count
        if nid in seen or count >= max_nodes:
            return
        seen.add(nid)
        count += 1
        n = by_id[nid]
        status, score = node_eval(n)
        style = {"passed": "green", "failed": "red"}.get(node_class(n), "dim")
        label = f"[{style}]{escape_markup(action_title(n) or nid)}[/{style}]"
        if score is not None and status == "passed":
            label += f" [green]{score:.3f}[/green]"
        elif status:
            label += f" [red]{status}[/red]"
        if nid in best_ids:
            label = f"[b]{label} ★[/b]"
        branch = parent.add(label)
        for k in kids.get(nid, []):
            add(branch, k)

    for r in roots:
        add(top, r)
    if len(nodes) > count:
        top.add(f"[dim]… {len(nodes) - count} more nodes (see --html)[/dim]")
    return top


def escape_markup(text: str) -> str:
    from rich.markup import escape as rich_escape

    return rich_escape(text)
