"""Keeping the world model's frontier supplied, as the published K-Search does before every cycle, and the follow-up
child every solved node is promised.

Before a cycle the frontier needs at least MIN_FRONTIER actions ready to try and, once something is solved, an open
child under the best node. When either is missing the proposer is asked for an edit that supplies it (told also
that at least one action ready to try should be rated above GOOD_SCORE, where its evidence allows such a rating);
what it cannot supply, a deterministic minimal child under the best node does (`WorldModel.fallback_edit`). A node
gets such an automatic child again only while none of its earlier ones ended without a solution, so a proposer
that has nothing new to try for it cannot keep the loop busy without spending budget.
"""

from __future__ import annotations

from typing import Any

from ksearch.worldmodel import WorldModel

MIN_FRONTIER = 3
GOOD_SCORE = 0.5
#: The marker `WorldModel.fallback_edit` puts on the children it makes.
AUTO = "auto_follow_up"


def _title(node: dict[str, Any]) -> str:
    return str((node.get("action") or {}).get("title") or node.get("choice") or node["node_id"])


def missing(wm: WorldModel, excluded: set[str] | None = None) -> list[str]:
    """What the frontier lacks (empty: nothing), in words the proposer can act on. Nodes in `excluded` (branches a
    backtrack set aside) do not count as ready to try."""
    frontier = [n for n in wm.frontier() if n["node_id"] not in (excluded or set())]
    out = []
    if len(frontier) < MIN_FRONTIER:
        out.append(f"only {len(frontier)} action(s) are ready to try; the frontier needs at least {MIN_FRONTIER}: "
                   "insert new actions under the root or under solved nodes")
    best = wm.best_node()
    if best is not None and wm.require_follow_up(best["node_id"]):
        score = best["solution_ref"]["eval"]["score"]
        out.append(f"the best node {best['node_id']} ('{_title(best)}', score {score:.4g}) has no open child: insert "
                   f"at least one follow-up under it (insert_node with parent_id {best['node_id']!r})")
    return out


def score_missing(wm: WorldModel, excluded: set[str] | None = None) -> str | None:
    """The published refresh's third requirement: an action ready to try that the proposer rates above GOOD_SCORE."""
    frontier = [n for n in wm.frontier() if n["node_id"] not in (excluded or set())]
    if any(float((n.get("action") or {}).get("score_0_to_1") or 0.0) > GOOD_SCORE for n in frontier):
        return None
    return (f"no action ready to try has score_0_to_1 above {GOOD_SCORE}: insert or update at least one action "
            f"you rate above {GOOD_SCORE}, where the evidence supports it")


def auto_child_allowed(wm: WorldModel, node_id: str) -> bool:
    """False when an automatic child of the node ended without a solution (too hard, or nothing new to try)."""
    return not any(c.get(AUTO) and not (c.get("solution_ref") or {}).get("solution_id")
                   and c["ksearch"]["status"] != "open" for c in wm.children(node_id))


def last_resort(wm: WorldModel, why: str) -> dict[str, Any] | None:
    """The deterministic edit for what the proposer left missing: a minimal child under the best node, and, while the
    frontier is short, under the next best solved nodes (at most the edit limit of 3). None when none may be made."""
    short = MIN_FRONTIER - len(wm.frontier())
    solved = sorted((n for n in wm.nodes() if (n.get("solution_ref") or {}).get("solution_id")),
                    key=lambda n: -float(n["solution_ref"]["eval"]["score"]))
    ops: list[dict[str, Any]] = []
    for i, n in enumerate(solved):
        if len(ops) >= 3 or (i > 0 and len(ops) >= short):
            break
        if not wm.require_follow_up(n["node_id"]) or not auto_child_allowed(wm, n["node_id"]):
            continue
        ops.extend(wm.fallback_edit(n["node_id"], why=why)["ops"])
    return {"active_leaf_id": None, "ops": ops} if ops else None
