"""The shape of the world-model JSON: normalising one node (defaults, clamping) and checking the tree.

Field names are those of the published K-Search implementation (see shared/reference/k-search-algorithm.md),
so a snapshot can be read by either tool. What ksearch adds lives under a `ksearch` key (per node and at the
top level); unknown keys are kept verbatim, so foreign snapshots survive a round trip.
"""

from __future__ import annotations

import copy
import json
import math
import re
from typing import Any

from ksearch.errors import WorldModelError

IMPACT_KEYS = ("memory_bandwidth", "register_pressure", "compute_intensity_and_hw_fit")
ACTION_KEYS = (
    "title",
    "description",
    "difficulty_1_to_5",
    "score_0_to_1",
    "expected_vs_baseline_factor",
    "rationale",
)
NODE_KEYS = (
    "node_id",
    "parent_id",
    "node_type",
    "decision",
    "choice",
    "action",
    "impacts",
    "overall_rating_0_to_10",
    "confidence_0_to_1",
    "solution_ref",
    "notes",
    "last_updated_round",
)
# Node states of our own (node["ksearch"]["status"]); "solved" is no state: it is `solution_ref.solution_id`.
OPEN, TOO_HARD, CLOSED = "open", "too_hard", "closed"
CLOSED_STATES = frozenset({TOO_HARD, CLOSED})

DEFAULT_RATING = 5.0
DEFAULT_CONFIDENCE = 0.5
DEFAULT_DIFFICULTY = 3
DEFAULT_SCORE = 0.5
FACTOR_RANGE = (0.01, 1000.0)


def number(value: Any, default: float, where: str, lo: float | None = None, hi: float | None = None) -> float:
    """A finite-or-clamped float; None gives the default; numeric strings are read; anything else is an
    error."""
    if value is None:
        return default
    if isinstance(value, bool):
        raise WorldModelError(f"{where}: expected a number, got {value!r}")
    if isinstance(value, int | float):
        x = float(value)
    elif isinstance(value, str):
        try:
            x = float(value.strip())
        except ValueError:
            raise WorldModelError(f"{where}: expected a number, got {value!r}") from None
    else:
        raise WorldModelError(f"{where}: expected a number, got {type(value).__name__}")
    if math.isnan(x):
        raise WorldModelError(f"{where}: NaN is not a valid value")
    if lo is not None:
        x = max(lo, x)
    if hi is not None:
        x = min(hi, x)
    return x


def text(value: Any) -> str:
    """Free text. LLMs sometimes send lists or objects (e.g. notes as {"CURRENT": ...}): they become lines."""
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        return "\n".join(text(v) for v in value)
    if isinstance(value, dict):
        return "\n".join(f"{k}: {text(v)}" for k, v in value.items())
    return str(value)


def node_ref(value: Any, where: str) -> str | None:
    """A node id: a non-empty string (ints are accepted and stringified); None or "" means none."""
    if value is None or value == "":
        return None
    if isinstance(value, bool) or not isinstance(value, str | int):
        raise WorldModelError(f"{where}: a node id must be a string, got {value!r}")
    return str(value)


def normalise_action(raw: Any, where: str, fallback_title: str = "") -> dict[str, Any] | None:
    if raw is None:
        return None
    if not isinstance(raw, dict):
        raise WorldModelError(f"{where}: action must be an object with title, description, ...")
    if not text(raw.get("title")).strip() and not text(raw.get("description")).strip():
        # The published implementation gives every node an action and leaves it empty where there is none (the
        # root, a decision-only node): such a node is no action, and is never selected.
        return None
    out: dict[str, Any] = {
        "title": text(raw.get("title")).strip() or fallback_title or "untitled action",
        "description": text(raw.get("description")),
        "difficulty_1_to_5": int(
            round(
                number(raw.get("difficulty_1_to_5"), DEFAULT_DIFFICULTY, f"{where}.difficulty_1_to_5", 1, 5)
            )
        ),
        "score_0_to_1": number(raw.get("score_0_to_1"), DEFAULT_SCORE, f"{where}.score_0_to_1", 0.0, 1.0),
        "expected_vs_baseline_factor": number(
            raw.get("expected_vs_baseline_factor"), 1.0, f"{where}.expected_vs_baseline_factor", *FACTOR_RANGE
        ),
        "rationale": text(raw.get("rationale")),
    }
    out.update({k: copy.deepcopy(v) for k, v in raw.items() if k not in out})
    return out


def _impact(raw: Any, where: str) -> dict[str, Any]:
    if raw is None:
        raw = {}
    if isinstance(raw, int | float | str) and not isinstance(raw, bool):
        raw = {"rating_0_to_10": raw}  # a bare rating
    if not isinstance(raw, dict):
        raise WorldModelError(f"{where}: an impact must be an object {{rating_0_to_10, risk, notes}}")
    out: dict[str, Any] = {
        "rating_0_to_10": number(
            raw.get("rating_0_to_10"), DEFAULT_RATING, f"{where}.rating_0_to_10", 0.0, 10.0
        ),
        "risk": text(raw.get("risk")),
        "notes": text(raw.get("notes")),
    }
    out.update({k: copy.deepcopy(v) for k, v in raw.items() if k not in out})
    return out


def normalise_impacts(raw: Any, where: str) -> dict[str, Any]:
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise WorldModelError(f"{where}: impacts must be an object keyed by {', '.join(IMPACT_KEYS)}")
    out = {k: _impact(raw.get(k), f"{where}.{k}") for k in IMPACT_KEYS}
    for k, v in raw.items():
        if k not in out:
            out[k] = _impact(v, f"{where}.{k}") if isinstance(v, dict) else copy.deepcopy(v)
    return out


def normalise_solution(raw: Any, where: str) -> dict[str, Any] | None:
    if raw is None:
        return None
    if not isinstance(raw, dict):
        raise WorldModelError(
            f"{where}: solution_ref must be an object {{solution_id, parent_solution_id, eval}}"
        )
    ev = raw.get("eval")
    if ev is None:
        ev = {}
    if not isinstance(ev, dict):
        raise WorldModelError(f"{where}.eval: must be an object {{status, score, score_name}}")
    metrics = ev.get("metrics")
    raw_score = ev.get("score")
    if raw_score is None and isinstance(metrics, dict):
        raw_score = metrics.get("score")  # where the published implementation keeps it
    score = number(raw_score, 0.0, f"{where}.eval.score")
    if math.isinf(score):
        raise WorldModelError(f"{where}.eval.score: must be finite")
    ev_out: dict[str, Any] = {
        "status": text(ev.get("status")),
        "score": score,
        "score_name": text(ev.get("score_name"))
        or (text(metrics.get("score_name")) if isinstance(metrics, dict) else "")
        or "speedup_geomean",
    }
    ev_out.update({k: copy.deepcopy(v) for k, v in ev.items() if k not in ev_out})
    out: dict[str, Any] = {
        "solution_id": node_ref(raw.get("solution_id"), f"{where}.solution_id"),
        "parent_solution_id": node_ref(raw.get("parent_solution_id"), f"{where}.parent_solution_id"),
        "eval": ev_out,
    }
    out.update({k: copy.deepcopy(v) for k, v in raw.items() if k not in out})
    return out


def normalise_node(raw: Any, where: str, fallback_id: str | None = None) -> dict[str, Any]:
    """One node with every published field present, values clamped, extra keys kept, our state under
    `ksearch`."""
    if not isinstance(raw, dict):
        raise WorldModelError(f"{where}: a node must be a JSON object, got {type(raw).__name__}")
    node_id = node_ref(raw.get("node_id", fallback_id), f"{where}.node_id")
    if node_id is None:
        raise WorldModelError(f"{where}: node_id is missing")
    where = f"node {node_id!r}"
    parent_id = node_ref(raw.get("parent_id"), f"{where}.parent_id")
    decision, choice = text(raw.get("decision")), text(raw.get("choice"))
    ks = raw.get("ksearch")
    if ks is None:
        ks = {}
    if not isinstance(ks, dict):
        raise WorldModelError(f"{where}.ksearch: must be an object")
    ks = copy.deepcopy(ks)
    status = ks.get("status", raw.get("status") if raw.get("status") in CLOSED_STATES else OPEN)
    if status not in (OPEN, TOO_HARD, CLOSED):
        raise WorldModelError(f"{where}.ksearch.status: {status!r} is not one of open, too_hard, closed")
    ks["status"] = status
    out: dict[str, Any] = {
        "node_id": node_id,
        "parent_id": parent_id,
        "node_type": text(raw.get("node_type")) or ("root" if parent_id is None else "action"),
        "decision": decision,
        "choice": choice,
        "action": normalise_action(raw.get("action"), f"{where}.action", choice or decision),
        "impacts": normalise_impacts(raw.get("impacts"), f"{where}.impacts"),
        "overall_rating_0_to_10": number(
            raw.get("overall_rating_0_to_10"), DEFAULT_RATING, f"{where}.overall_rating_0_to_10", 0.0, 10.0
        ),
        "confidence_0_to_1": number(
            raw.get("confidence_0_to_1"), DEFAULT_CONFIDENCE, f"{where}.confidence_0_to_1", 0.0, 1.0
        ),
        "solution_ref": normalise_solution(raw.get("solution_ref"), f"{where}.solution_ref"),
        "notes": text(raw.get("notes")),
        "last_updated_round": int(number(raw.get("last_updated_round"), 0, f"{where}.last_updated_round", 0)),
        "ksearch": ks,
    }
    out.update({k: copy.deepcopy(v) for k, v in raw.items() if k not in out})
    return out


def solution_id(node: dict[str, Any]) -> str | None:
    ref = node.get("solution_ref")
    return ref.get("solution_id") if isinstance(ref, dict) else None


def is_closed(node: dict[str, Any]) -> bool:
    return node["ksearch"]["status"] in CLOSED_STATES


def check_tree(nodes: list[dict[str, Any]], root_id: str, error: type[ValueError] = WorldModelError) -> None:
    """Unique ids, the root has no parent, every other node has an existing parent, no cycles."""
    index: dict[str, dict[str, Any]] = {}
    for n in nodes:
        if n["node_id"] in index:
            raise error(f"node id {n['node_id']!r} is used twice")
        index[n["node_id"]] = n
    if root_id not in index:
        raise error(f"root {root_id!r} is not among the nodes")
    if index[root_id]["parent_id"] is not None:
        raise error(f"root {root_id!r} must not have a parent")
    reaches_root = {root_id}
    for n in nodes:
        path: list[str] = []
        cur = n["node_id"]
        while cur not in reaches_root:
            if cur in path:
                raise error(f"nodes {' -> '.join(path)} form a cycle")
            path.append(cur)
            parent = index[cur]["parent_id"]
            if parent is None:
                raise error(f"node {cur!r} has no parent but is not the root {root_id!r}")
            if parent not in index:
                raise error(f"node {cur!r} has parent {parent!r}, which does not exist")
            cur = parent
        reaches_root.update(path)


_SEQ_ID = re.compile(r"^n(\d+)$")


def next_seq(nodes: list[dict[str, Any]]) -> int:
    """First free number for ids of the form n<k> (ids are never reused: the counter is kept in the JSON)."""
    nums = [int(m.group(1)) for n in nodes if (m := _SEQ_ID.match(n["node_id"]))]
    return max(nums, default=0) + 1


def normalise_model(raw: Any) -> dict[str, Any]:
    """The whole model: top-level fields, nodes (list or keyed by node_id), tree checks, our id counter."""
    if isinstance(raw, str | bytes):
        try:
            raw = json.loads(raw)
        except json.JSONDecodeError as exc:
            raise WorldModelError(f"world model is not valid JSON: {exc}") from None
    if not isinstance(raw, dict):
        raise WorldModelError(f"world model must be a JSON object, got {type(raw).__name__}")
    tree = raw.get("decision_tree")
    if not isinstance(tree, dict):
        raise WorldModelError("world model has no decision_tree object {root_id, active_leaf_id, nodes}")
    raw_nodes = tree.get("nodes")
    if isinstance(raw_nodes, dict):  # keyed by node_id
        items = []
        for key, n in raw_nodes.items():
            if isinstance(n, dict) and n.get("node_id") not in (None, key):
                raise WorldModelError(f"node keyed {key!r} says node_id {n.get('node_id')!r}")
            items.append(normalise_node(n, f"decision_tree.nodes[{key!r}]", fallback_id=key))
        nodes = items
    elif isinstance(raw_nodes, list):
        nodes = [normalise_node(n, f"decision_tree.nodes[{i}]") for i, n in enumerate(raw_nodes)]
    else:
        raise WorldModelError("decision_tree.nodes must be a list of nodes (or an object keyed by node_id)")
    if not nodes:
        raise WorldModelError("decision_tree.nodes is empty: a world model needs at least its root")
    root_id = node_ref(tree.get("root_id"), "decision_tree.root_id")
    if root_id is None:
        roots = [n["node_id"] for n in nodes if n["parent_id"] is None]
        if len(roots) != 1:
            raise WorldModelError(
                f"decision_tree.root_id is missing and there are {len(roots)} parentless nodes"
            )
        root_id = roots[0]
    check_tree(nodes, root_id)
    active = node_ref(tree.get("active_leaf_id"), "decision_tree.active_leaf_id")
    if active is not None and all(n["node_id"] != active for n in nodes):
        active = None  # a stale pointer is not worth refusing a whole snapshot for
    questions = raw.get("open_questions")
    if questions is None:
        questions = []
    elif not isinstance(questions, list):
        questions = [questions]
    signals = raw.get("computed_signals")
    if signals is None:
        signals = {}
    if not isinstance(signals, dict):
        raise WorldModelError("computed_signals must be an object")
    ks = raw.get("ksearch")
    if ks is None:
        ks = {}
    if not isinstance(ks, dict):
        raise WorldModelError("top-level ksearch must be an object")
    ks = copy.deepcopy(ks)
    ks["next_node_seq"] = max(
        int(number(ks.get("next_node_seq"), 1, "ksearch.next_node_seq", 1)), next_seq(nodes)
    )
    tree_out: dict[str, Any] = {"root_id": root_id, "active_leaf_id": active, "nodes": nodes}
    tree_out.update({k: copy.deepcopy(v) for k, v in tree.items() if k not in tree_out})
    out: dict[str, Any] = {
        "kernel_summary": text(raw.get("kernel_summary")),
        "decision_tree": tree_out,
        "open_questions": copy.deepcopy(questions),
        "computed_signals": copy.deepcopy(signals),
        "ksearch": ks,
    }
    out.update({k: copy.deepcopy(v) for k, v in raw.items() if k not in out})
    return out
