"""Tidying a proposer's initial tree before it is loaded: the ids and parents that only break the tree's links.

A JSON schema can give a model's answer the shape of a world model, but not its links: a small model repeats node
ids, leaves a child without its parent, or names a parent that is not there. Such a tree would be refused whole
(schema.check_tree), and the offline world model would stand in for everything the model did write. `tidy_tree`
mends only the links, on a copy: the first node that is the root stays the root (one is added when none is), a
repeated or missing id gets a fresh one, and a node whose parent is not an earlier node hangs from the root. Every
change is listed, so the run can say what was mended. Content (decisions, actions, ratings) is left to the loader,
which clamps it.

Only for a proposer's first tree: stored snapshots and edits are checked as they are, never mended.
"""

from __future__ import annotations

import copy
from typing import Any


def tidy_tree(raw: Any) -> tuple[Any, list[str]]:
    """(the tree with its links mended, what was changed); anything that is not a tree with a list of nodes is
    returned as it is, for the loader to refuse with its own message."""
    tree = raw.get("decision_tree") if isinstance(raw, dict) else None
    nodes = tree.get("nodes") if isinstance(tree, dict) else None
    if not isinstance(nodes, list):
        return raw, []
    out = copy.deepcopy(raw)
    tree = out["decision_tree"]
    changes: list[str] = []
    kept = [n for n in tree["nodes"] if isinstance(n, dict)]
    if len(kept) < len(tree["nodes"]):
        changes.append(f"{len(tree['nodes']) - len(kept)} entries of nodes that are not objects dropped")
    root = _root(kept, tree.get("root_id"))
    if root is None:
        root = {"node_id": "root", "parent_id": None, "node_type": "root", "decision": "start",
                "choice": "the starting kernel", "notes": "", "action": None, "impacts": None}
        kept.insert(0, root)
        changes.append("no root: one added")
    root_id = root.get("node_id") if isinstance(root.get("node_id"), str) and root.get("node_id") else "root"
    if root.get("node_id") != root_id:
        changes.append(f"the root's id {root.get('node_id')!r} set to {root_id!r}")
    root["node_id"] = root_id
    if root.get("parent_id") is not None:
        changes.append(f"the root's parent {root.get('parent_id')!r} removed")
        root["parent_id"] = None
    if tree.get("root_id") != root_id:
        tree["root_id"] = root_id
    seen = {root_id}
    fresh = _fresh_ids(kept)
    ordered = [root] + [n for n in kept if n is not root]
    for i, node in enumerate(ordered[1:], 1):
        nid = node.get("node_id")
        if not isinstance(nid, str) or not nid or nid in seen:
            new = next(fresh)
            changes.append(f"node {i}: id {nid!r} {'repeated' if nid in seen else 'missing'}, now {new!r}")
            node["node_id"] = nid = new
        parent = node.get("parent_id")
        if parent not in seen:  # None, unknown, itself, or a later node (which could close a cycle)
            changes.append(f"node {nid!r}: parent {parent!r} is no earlier node, now the root")
            node["parent_id"] = root_id
        if node.get("node_type") == "root":
            node["node_type"] = "action"
        seen.add(nid)
    tree["nodes"] = ordered
    return out, changes


def _root(nodes: list[dict[str, Any]], root_id: Any) -> dict[str, Any] | None:
    for test in (lambda n: n.get("node_id") == root_id, lambda n: n.get("node_type") == "root",
                 lambda n: n.get("parent_id") is None):
        found = next((n for n in nodes if test(n)), None)
        if found is not None:
            return found
    return None


def _fresh_ids(nodes: list[dict[str, Any]]) -> Any:
    taken = {n.get("node_id") for n in nodes}
    k = 1
    while True:
        if f"n{k}" not in taken:
            taken.add(f"n{k}")
            yield f"n{k}"
        k += 1
