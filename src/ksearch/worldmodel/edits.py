"""World-model edits from the proposer: {"active_leaf_id": ..., "ops": [...]}, applied all or nothing.

Ops (the published names; "op" names the operation, "type" is accepted too):
  update_node {node_id, patch}
      change ratings, texts, action fields (merged); never ids, parents, solution_ref or our `ksearch` state;
      the root never gets an action
  insert_node {parent_id, parent_solution_id?, node}
      add a child action under an existing node (or one inserted earlier in the same edit); the node may not
      carry a solution; the parent may not be an unsolved too_hard/closed node (the child could never run)
  split_node {node_id, children: [node, ...], parent_patch?}
      as published: the node stays (patched by parent_patch) and the alternatives it is refined into are added
      as its children; ratings and action figures (difficulty, score, expected factor) they leave out are the
      node's; not under an unsolved too_hard/closed node
  delete_node {node_id}
      prune an open leaf
An *open leaf* is a non-root node without solution, without children and not marked too_hard/closed (a
too-hard node stays, so the failure is remembered).

Every new node (insert or split alternative) gets a fresh id n<k> that was never used in this model; the id a
proposer writes is remembered for the rest of the edit, so later ops (and active_leaf_id) may refer to it, but
an id that exists in the tree always means the existing node. At most `max_inserts` new nodes per edit. With
`require_child_of`, the edit must insert at least one child under that (freshly solved) node.
"""

from __future__ import annotations

import copy
import json
from typing import Any

from ksearch.errors import EditRejected, WorldModelError
from ksearch.worldmodel.schema import (
    CLOSED_STATES,
    OPEN,
    check_tree,
    is_closed,
    node_ref,
    normalise_node,
    solution_id,
)

OP_NAMES = ("insert_node", "update_node", "split_node", "delete_node")
_ALIASES = {
    "insert": "insert_node",
    "add_node": "insert_node",
    "update": "update_node",
    "split": "split_node",
    "delete": "delete_node",
    "prune": "delete_node",
    "prune_node": "delete_node",
    "remove_node": "delete_node",
}
_IMMUTABLE = ("node_id", "parent_id", "solution_ref", "ksearch")
# What a split child never takes from the node it refines: its place and words are its own.
_OWN = ("notes", "last_updated_round", "node_type", "decision", "choice", "action")
_OWN_ACTION = ("title", "description", "rationale")


def has_open_child(data: dict[str, Any], node_id: str) -> bool:
    return any(
        n["parent_id"] == node_id and n["action"] is not None and solution_id(n) is None and not is_closed(n)
        for n in data["decision_tree"]["nodes"]
    )


def _title(n: dict[str, Any]) -> str:
    return str(n["action"]["title"]) if n.get("action") else str(n.get("choice") or n["node_id"])


class _Edit:
    def __init__(self, data: dict[str, Any], round_: int, max_inserts: int) -> None:
        self.data = data
        self.nodes: list[dict[str, Any]] = data["decision_tree"]["nodes"]
        self.root_id: str = data["decision_tree"]["root_id"]
        self.round = max(0, int(round_))
        self.max_inserts = max_inserts
        self.proposed: dict[str, str] = {}  # id written by the proposer -> id given
        self.removed: set[str] = set()
        self.inserted: list[str] = []
        self.changes: list[str] = []
        self.where = ""

    # -- helpers ---------------------------------------------------------------------------------------------

    def reject(self, reason: str) -> EditRejected:
        return EditRejected(f"{self.where}: {reason}" if self.where else reason)

    def find(self, node_id: str) -> dict[str, Any] | None:
        for n in self.nodes:
            if n["node_id"] == node_id:
                return n
        return None

    def resolve(self, value: Any, field: str) -> dict[str, Any]:
        try:
            ref = node_ref(value, field)
        except WorldModelError as exc:
            raise self.reject(str(exc)) from None
        if ref is None:
            raise self.reject(f"{field} is missing")
        n = self.find(ref)
        if n is None and ref in self.proposed:
            n = self.find(self.proposed[ref])
        if n is None:
            gone = " (it was removed earlier in this edit)" if ref in self.removed else ""
            raise self.reject(f"{field} {ref!r} does not exist{gone}; existing ids: {self.id_list()}")
        return n

    def id_list(self) -> str:
        ids = [n["node_id"] for n in self.nodes]
        return ", ".join(ids[:40]) + (" ..." if len(ids) > 40 else "")

    def normalise(self, raw: dict[str, Any]) -> dict[str, Any]:
        try:
            return normalise_node(raw, f"node {raw.get('node_id')!r}")
        except WorldModelError as exc:
            raise self.reject(str(exc)) from None

    def fresh_id(self) -> str:
        ks = self.data["ksearch"]
        seq = int(ks["next_node_seq"])
        while self.find(f"n{seq}") is not None:
            seq += 1
        ks["next_node_seq"] = seq + 1
        return f"n{seq}"

    def children_of(self, node_id: str) -> list[dict[str, Any]]:
        return [n for n in self.nodes if n["parent_id"] == node_id]

    def open_leaf_problem(self, n: dict[str, Any]) -> str | None:
        if n["node_id"] == self.root_id:
            return "it is the root"
        if solution_id(n) is not None:
            return f"it has an attached solution ({solution_id(n)}); solutions are never removed"
        kids = self.children_of(n["node_id"])
        if kids:
            names = ", ".join(k["node_id"] for k in kids)
            return f"it has children ({names}); only leaves can be pruned or split"
        if is_closed(n):
            return f"it is marked {n['ksearch']['status']} and is kept so the failure is remembered"
        return None

    def new_node(
        self, raw: Any, parent: dict[str, Any], inherit: dict[str, Any] | None = None
    ) -> dict[str, Any]:
        if not isinstance(raw, dict):
            raise self.reject("a new node must be an object {decision, choice, action{title, ...}, ...}")
        if isinstance(raw.get("solution_ref"), dict) and raw["solution_ref"].get("solution_id") not in (
            None,
            "",
        ):
            raise self.reject(
                "a new node cannot carry a solution_ref; solutions are attached by measurements"
            )
        if raw.get("node_type") == "root":
            raise self.reject("there is exactly one root; a new node cannot have node_type 'root'")
        body = {k: copy.deepcopy(v) for k, v in raw.items() if k not in _IMMUTABLE}
        if inherit is not None:  # a split alternative: ratings and action figures it leaves out are the node's
            for k, v in inherit.items():
                if k not in _IMMUTABLE and k not in _OWN:
                    body.setdefault(k, copy.deepcopy(v))
            if isinstance(raw.get("action"), dict) and isinstance(inherit.get("action"), dict):
                figures = {k: v for k, v in inherit["action"].items() if k not in _OWN_ACTION}
                body["action"] = {**copy.deepcopy(figures), **copy.deepcopy(raw["action"])}
        if not isinstance(body.get("action"), dict) or not str(body["action"].get("title") or "").strip():
            raise self.reject('a new node needs an action with a title: {"action": {"title": ..., ...}}')
        if len(self.inserted) >= self.max_inserts:
            raise self.reject(
                f"at most {self.max_inserts} new nodes per edit (insert_node and split_node "
                "children both count); send the most promising ones"
            )
        new_id = self.fresh_id()
        try:
            proposed = node_ref(raw.get("node_id"), "node_id")
        except WorldModelError:
            proposed = None  # an unusable id is simply replaced
        if proposed is not None:
            self.proposed[proposed] = new_id
        body.update(
            {
                "node_id": new_id,
                "parent_id": parent["node_id"],
                "solution_ref": None,
                "last_updated_round": self.round,
                "ksearch": {
                    "status": OPEN,
                    "created_round": self.round,
                    "parent_solution_id": solution_id(parent),
                },
            }
        )
        body.setdefault("node_type", "action")
        node = self.normalise(body)
        self.inserted.append(new_id)
        return node

    # -- ops -------------------------------------------------------------------------------------------------

    def update(self, op: dict[str, Any]) -> None:
        n = self.resolve(op.get("node_id"), "node_id")
        patch = op.get("patch")
        if not isinstance(patch, dict):
            raise self.reject('update_node needs "patch": an object of the fields to change')
        for key in _IMMUTABLE:
            if key in patch and patch[key] != n[key]:
                what = (
                    "solutions are attached by measurements only" if key == "solution_ref" else "it is fixed"
                )
                raise self.reject(f"{key} of {n['node_id']!r} cannot be changed by an edit ({what})")
        is_root = n["node_id"] == self.root_id
        if (
            "node_type" in patch
            and patch["node_type"] != n["node_type"]
            and (patch["node_type"] == "root" or is_root)
        ):
            raise self.reject("node_type 'root' belongs to the root alone")
        if "action" in patch and patch["action"] is None and not is_root and n["action"] is not None:
            raise self.reject("an action cannot be removed; use delete_node on an open leaf instead")
        if is_root and patch.get("action") is not None:
            raise self.reject("the root carries no action; insert a child under it instead")
        merged = copy.deepcopy(n)
        for key, value in patch.items():
            if key in _IMMUTABLE:
                continue
            if key == "action" and isinstance(value, dict) and isinstance(n["action"], dict):
                merged["action"] = {**merged["action"], **copy.deepcopy(value)}
            elif key == "impacts" and isinstance(value, dict) and isinstance(n["impacts"], dict):
                impacts = merged["impacts"]
                for ik, iv in value.items():
                    old = impacts.get(ik)
                    impacts[ik] = (
                        {**old, **copy.deepcopy(iv)}
                        if isinstance(old, dict) and isinstance(iv, dict)
                        else copy.deepcopy(iv)
                    )
            else:
                merged[key] = copy.deepcopy(value)
        merged["last_updated_round"] = self.round
        new = self.normalise(merged)
        diffs = _describe_diff(n, new)
        n.clear()
        n.update(new)
        self.changes.append(
            f"updated {n['node_id']} '{_title(n)}'" + (f": {diffs}" if diffs else " (no change)")
        )

    def insert(self, op: dict[str, Any]) -> None:
        raw = op.get("node")
        parent_ref = op.get("parent_id")
        if parent_ref is None and isinstance(raw, dict):
            parent_ref = raw.get("parent_id")
        parent = self.resolve(parent_ref, "parent_id")
        if is_closed(parent) and solution_id(parent) is None:
            raise self.reject(
                f"parent {parent['node_id']!r} is marked {parent['ksearch']['status']} and unsolved, so "
                "a child under it could never be selected; insert the idea elsewhere"
            )
        node = self.new_node(raw, parent)
        self.nodes.append(node)
        self.changes.append(f"inserted {node['node_id']} '{_title(node)}' under {parent['node_id']}")

    def split(self, op: dict[str, Any]) -> None:
        """As published: the node stays (patched by `parent_patch` if given) and the alternatives it is refined
        into become its children; they wait, like any child, until the node has a solution."""
        target = self.resolve(op.get("node_id"), "node_id")
        if is_closed(target) and solution_id(target) is None:
            raise self.reject(
                f"cannot split {target['node_id']!r}: it is marked {target['ksearch']['status']} and unsolved, "
                "so children under it could never be selected; insert the alternatives elsewhere"
            )
        alts = next((op[k] for k in ("children", "nodes", "alternatives") if k in op), None)
        if not isinstance(alts, list) or not alts:
            raise self.reject('split_node needs "children": a list of the alternative nodes to add under the node')
        patch = op.get("parent_patch")
        if patch not in (None, {}):
            if not isinstance(patch, dict):
                raise self.reject('"parent_patch" must be an object of the node\'s fields to change')
            self.update({"node_id": target["node_id"], "patch": patch})
        new_nodes = [self.new_node(raw, target, inherit=target) for raw in alts]
        self.nodes.extend(new_nodes)
        parts = ", ".join(f"{n['node_id']} '{_title(n)}'" for n in new_nodes)
        self.changes.append(f"split {target['node_id']} '{_title(target)}': {parts} added under it")

    def delete(self, op: dict[str, Any]) -> None:
        target = self.resolve(op.get("node_id"), "node_id")
        problem = self.open_leaf_problem(target)
        if problem:
            raise self.reject(f"cannot delete {target['node_id']!r}: {problem}")
        self.nodes.remove(target)
        self.removed.add(target["node_id"])
        if self.data["decision_tree"]["active_leaf_id"] == target["node_id"]:
            self.data["decision_tree"]["active_leaf_id"] = target["parent_id"]
        self.changes.append(f"deleted {target['node_id']} '{_title(target)}'")


def _describe_diff(old: dict[str, Any], new: dict[str, Any]) -> str:
    """'score_0_to_1 0.9 -> 0.6; changed notes, action.description' (what a report or the proposer reads)."""
    numeric, other = [], []
    for key in ("overall_rating_0_to_10", "confidence_0_to_1"):
        if old[key] != new[key]:
            numeric.append(f"{key} {old[key]:g} -> {new[key]:g}")
    oa, na = old.get("action") or {}, new.get("action") or {}
    for key in sorted(set(oa) | set(na)):
        if oa.get(key) == na.get(key):
            continue
        if isinstance(oa.get(key), int | float) and isinstance(na.get(key), int | float):
            numeric.append(f"{key} {oa[key]:g} -> {na[key]:g}")
        else:
            other.append(f"action.{key}")
    skip = ("overall_rating_0_to_10", "confidence_0_to_1", "last_updated_round", "action")
    other.extend(sorted(k for k in set(old) | set(new) if k not in skip and old.get(k) != new.get(k)))
    return "; ".join(numeric + (["changed " + ", ".join(other)] if other else []))


def apply_edit_ops(
    data: dict[str, Any], edits: Any, round_: int, max_inserts: int, require_child_of: str | None
) -> tuple[dict[str, Any], list[str]]:
    """Apply an edit to a copy of `data`; return (new data, change descriptions) or raise EditRejected."""
    if isinstance(edits, str | bytes):
        try:
            edits = json.loads(edits)
        except json.JSONDecodeError as exc:
            raise EditRejected(f"the edit is not valid JSON: {exc}") from None
    if not isinstance(edits, dict):
        raise EditRejected('an edit must be a JSON object {"active_leaf_id": ..., "ops": [...]}')
    ops = edits.get("ops", [])
    if ops is None:
        ops = []
    if not isinstance(ops, list):
        raise EditRejected('"ops" must be a list of operations')
    edit = _Edit(copy.deepcopy(data), round_, max_inserts)
    for i, op in enumerate(ops):
        edit.where = f"ops[{i}]"
        if not isinstance(op, dict):
            raise edit.reject('an operation must be an object like {"op": "insert_node", ...}')
        name = op.get("op", op.get("type", op.get("operation")))
        name = _ALIASES.get(str(name), name)
        edit.where = f"ops[{i}] ({name})"
        if name == "update_node":
            edit.update(op)
        elif name == "insert_node":
            edit.insert(op)
        elif name == "split_node":
            edit.split(op)
        elif name == "delete_node":
            edit.delete(op)
        else:
            edit.where = f"ops[{i}]"
            raise edit.reject(f"unknown operation {name!r}; use one of {', '.join(OP_NAMES)}")
    edit.where = ""
    tree = edit.data["decision_tree"]
    if edits.get("active_leaf_id") not in (None, ""):
        edit.where = "active_leaf_id"
        leaf = edit.resolve(edits["active_leaf_id"], "active_leaf_id")
        edit.where = ""
        if tree["active_leaf_id"] != leaf["node_id"]:
            edit.changes.append(f"active leaf -> {leaf['node_id']}")
        tree["active_leaf_id"] = leaf["node_id"]
    if require_child_of is not None and not any(
        n["node_id"] in edit.inserted and n["parent_id"] == require_child_of for n in edit.nodes
    ):
        raise EditRejected(
            f"node {require_child_of!r} was just solved: the edit must insert at least one follow-up "
            f"child under it (insert_node with parent_id {require_child_of!r})"
        )
    _check_invariants(data, edit.data)
    return edit.data, edit.changes


def _check_invariants(old: dict[str, Any], new: dict[str, Any]) -> None:
    """A safety net behind the per-op rules: the tree is still a tree and nothing measured was lost."""
    old_tree, new_tree = old["decision_tree"], new["decision_tree"]
    if new_tree["root_id"] != old_tree["root_id"]:
        raise EditRejected("the root cannot change")
    check_tree(new_tree["nodes"], new_tree["root_id"], error=EditRejected)
    index = {n["node_id"]: n for n in new_tree["nodes"]}
    for n in old_tree["nodes"]:
        if solution_id(n) is not None:
            kept = index.get(n["node_id"])
            if kept is None or kept["solution_ref"] != n["solution_ref"]:
                raise EditRejected(f"the solution attached to {n['node_id']!r} must be kept unchanged")
        if (
            n["ksearch"]["status"] in CLOSED_STATES
            and n["node_id"] in index
            and index[n["node_id"]]["ksearch"]["status"] != n["ksearch"]["status"]
        ):
            raise EditRejected(
                f"{n['node_id']!r} is marked {n['ksearch']['status']}; an edit cannot reopen it"
            )
