"""The K-Search world model: a persistent decision tree of optimisation actions, with ratings and solutions.

Each root-to-leaf path is an optimisation plan; siblings are competing alternatives; refining an idea adds a
child and never overwrites the parent. The JSON uses the published K-Search field names (kernel_summary,
decision_tree{root_id, active_leaf_id, nodes}, open_questions, computed_signals; per node: node_id, parent_id,
node_type, decision, choice, action{...}, impacts{...}, overall_rating_0_to_10, confidence_0_to_1,
solution_ref{...}, notes, last_updated_round). Our own state sits under a `ksearch` key: per node {"status":
open|too_hard|closed, ...}, top level {"next_node_seq"}.

A node is *solved* when `solution_ref.solution_id` is set. The *frontier* (what may be selected next) holds
the nodes that have an action, are not solved, are not too_hard/closed, and whose parent is the root or is
solved: a child action waits until its parent is implemented.

Accessors return copies; change the model only through `attach_solution`, `mark_too_hard` and `apply_edits`.
"""

from __future__ import annotations

import copy
import json
import math
import random
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ksearch.errors import EditRejected, WorldModelError
from ksearch.worldmodel.edits import apply_edit_ops, has_open_child
from ksearch.worldmodel.schema import (
    ACTION_KEYS,
    CLOSED,
    NODE_KEYS,
    OPEN,
    TOO_HARD,
    is_closed,
    normalise_model,
    number,
    solution_id,
    text,
)

if TYPE_CHECKING:
    from ksearch.config import SelectionWeights

__all__ = ["ANALYSIS_HEADING", "EditRejected", "WorldModel", "WorldModelError"]

_TIE_EPS = 1e-9
#: The published selection's difficulty cut-off: harder actions wait while easier ones are ready.
PUBLISHED_MAX_DIFFICULTY = 4
#: The root's notes keep the run's analysis under this heading (as published), for every later world-model prompt.
ANALYSIS_HEADING = "ANALYSIS"


@dataclass
class WorldModel:
    data: dict[str, Any]

    # ---- loading and saving --------------------------------------------------------------------------------

    @classmethod
    def from_json(cls, data: dict[str, Any] | str) -> WorldModel:
        """Validate and normalise a world model (ours or a K-Search snapshot). Out-of-range values are clamped
        (ratings 0..10, confidence and score_0_to_1 0..1, difficulty 1..5, expected_vs_baseline_factor
        0.01..1000); missing optional fields get defaults; nodes may be a list or an object keyed by
        node_id."""
        return cls(normalise_model(data))

    def to_json(self) -> dict[str, Any]:
        return copy.deepcopy(self.data)

    def dumps(self) -> str:
        """Canonical text (sorted keys): equal models give equal bytes."""
        return json.dumps(self.data, sort_keys=True, separators=(",", ":"))

    @classmethod
    def new(cls, kernel_summary: str, actions: list[dict[str, Any]]) -> WorldModel:
        """A root plus one child per action. Action fields (title, description, difficulty_1_to_5,
        score_0_to_1, expected_vs_baseline_factor, rationale) go into the node's `action`; impacts,
        overall_rating_0_to_10, confidence_0_to_1, notes, decision, choice go to the node; any other key (e.g.
        pattern_id) is kept verbatim on the node."""
        nodes: list[dict[str, Any]] = [
            {
                "node_id": "root",
                "parent_id": None,
                "node_type": "root",
                "decision": "kernel design",
                "choice": "starting kernel",
                "action": None,
            }
        ]
        for i, a in enumerate(actions, start=1):
            if not isinstance(a, dict):
                raise WorldModelError(f"actions[{i - 1}] must be an object, got {type(a).__name__}")
            node: dict[str, Any] = {
                k: copy.deepcopy(v)
                for k, v in a.items()
                if k not in ACTION_KEYS and k not in ("node_id", "parent_id", "solution_ref")
            }
            node.update(
                {
                    "node_id": f"n{i}",
                    "parent_id": "root",
                    "node_type": "action",
                    "action": {k: a[k] for k in ACTION_KEYS if k in a},
                }
            )
            node.setdefault("decision", "first optimisation")
            node.setdefault("choice", text(a.get("title")))
            nodes.append(node)
        return cls.from_json(
            {
                "kernel_summary": kernel_summary,
                "decision_tree": {"root_id": "root", "active_leaf_id": None, "nodes": nodes},
                "open_questions": [],
                "computed_signals": {},
            }
        )

    # ---- navigation ----------------------------------------------------------------------------------------

    @property
    def root_id(self) -> str:
        return str(self.data["decision_tree"]["root_id"])

    @property
    def active_leaf_id(self) -> str | None:
        active = self.data["decision_tree"]["active_leaf_id"]
        return None if active is None else str(active)

    def set_active_leaf(self, node_id: str | None) -> None:
        if node_id is not None:
            self._node(node_id)
        self.data["decision_tree"]["active_leaf_id"] = node_id

    def _nodes(self) -> list[dict[str, Any]]:
        nodes: list[dict[str, Any]] = self.data["decision_tree"]["nodes"]
        return nodes

    def _index(self) -> dict[str, dict[str, Any]]:
        return {n["node_id"]: n for n in self._nodes()}

    def _node(self, node_id: str) -> dict[str, Any]:
        for n in self._nodes():
            if n["node_id"] == node_id:
                return n
        raise KeyError(f"world model has no node {node_id!r}")

    def _children_map(self) -> dict[str, list[dict[str, Any]]]:
        kids: dict[str, list[dict[str, Any]]] = {n["node_id"]: [] for n in self._nodes()}
        for n in self._nodes():
            if n["parent_id"] is not None:
                kids[n["parent_id"]].append(n)
        return kids

    def node(self, node_id: str) -> dict[str, Any]:
        return copy.deepcopy(self._node(node_id))

    def has_node(self, node_id: str) -> bool:
        return any(n["node_id"] == node_id for n in self._nodes())

    def nodes(self) -> list[dict[str, Any]]:
        return copy.deepcopy(self._nodes())

    def children(self, node_id: str) -> list[dict[str, Any]]:
        self._node(node_id)
        return [copy.deepcopy(n) for n in self._nodes() if n["parent_id"] == node_id]

    def parent(self, node_id: str) -> dict[str, Any] | None:
        pid = self._node(node_id)["parent_id"]
        return None if pid is None else self.node(pid)

    def path(self, node_id: str) -> list[dict[str, Any]]:
        """Root first, `node_id` last."""
        out = [self._node(node_id)]
        while out[-1]["parent_id"] is not None:
            out.append(self._node(out[-1]["parent_id"]))
        return [copy.deepcopy(n) for n in reversed(out)]

    def depth(self, node_id: str) -> int:
        return len(self.path(node_id)) - 1

    # ---- frontier and selection ----------------------------------------------------------------------------

    def _open_ids(self) -> set[str]:
        index, root = self._index(), self.root_id
        return {
            n["node_id"]
            for n in index.values()
            if n["action"] is not None
            and solution_id(n) is None
            and not is_closed(n)
            and n["parent_id"] is not None
            and (n["parent_id"] == root or solution_id(index[n["parent_id"]]) is not None)
        }

    def frontier(self) -> list[dict[str, Any]]:
        """Open nodes in tree order: an action, no solution, not too_hard/closed, parent root or solved."""
        open_ids = self._open_ids()
        return [copy.deepcopy(n) for n in self._nodes() if n["node_id"] in open_ids]

    def _branch_visits(self, node_id: str, visits: dict[str, int]) -> int:
        """Attempts made anywhere under the node's top-level branch (its ancestor just below the root)."""
        index = self._index()
        branch = index[node_id]
        while branch["parent_id"] is not None and branch["parent_id"] != self.root_id:
            branch = index[branch["parent_id"]]
        if branch["node_id"] == self.root_id:
            return max(0, int(visits.get(self.root_id, 0)))
        kids = self._children_map()
        total, stack = 0, [branch]
        while stack:
            n = stack.pop()
            total += max(0, int(visits.get(n["node_id"], 0)))
            stack.extend(kids[n["node_id"]])
        return total

    def priority(self, node_id: str, weights: SelectionWeights, visits: dict[str, int]) -> float:
        """Priority V of a node:

            V = w.score * s + w.rating * r / 10 + w.confidence * c
                - w.difficulty * (d - 1) / 4 + w.exploration * b
            b = min(1, sqrt(2 * ln(1 + N) / (1 + n_b)))   (b = 0 while N = 0)

        s = action.score_0_to_1, r = overall_rating_0_to_10, c = confidence_0_to_1,
        d = action.difficulty_1_to_5 (a node without action counts as s = 0, d = 5), w = SelectionWeights.
        N = all attempts so far (the sum of `visits`); n_b = attempts under the node's top-level branch (the
        subtree of its ancestor just below the root; the node itself at depth 1). A frontier node's subtree
        is almost never visited (its children wait for its solution), so the branch is the unit that can be
        "rarely tried". b is a UCB-style bonus: an untried branch gets 1 once anything was tried; a branch's
        bonus shrinks as its attempts grow, and a neglected branch's grows back as N grows. Every term other
        than b lies in [0, 1], so the weights read as relative importance.
        """
        n = self._node(node_id)
        action = n["action"] or {}
        s = float(action.get("score_0_to_1", 0.0))
        d = float(action.get("difficulty_1_to_5", 5))
        r = float(n["overall_rating_0_to_10"]) / 10.0
        c = float(n["confidence_0_to_1"])
        total = sum(max(0, int(v)) for v in visits.values())
        bonus = 0.0
        if total > 0:
            bonus = min(
                1.0, math.sqrt(2.0 * math.log1p(total) / (1.0 + self._branch_visits(node_id, visits)))
            )
        return (
            weights.score * s
            + weights.rating * r
            + weights.confidence * c
            - weights.difficulty * (d - 1.0) / 4.0
            + weights.exploration * bonus
        )

    def ranked_frontier(
        self, weights: SelectionWeights, visits: dict[str, int]
    ) -> list[tuple[float, dict[str, Any]]]:
        """(V, node) for the frontier, best first (ties in tree order); for reports and the live view."""
        ranked = [(self.priority(n["node_id"], weights, visits), n) for n in self.frontier()]
        return sorted(ranked, key=lambda t: -t[0])

    def published_order(self, exclude: set[str] | frozenset[str] = frozenset()) -> list[dict[str, Any]]:
        """The frontier in the published K-Search's order: the actions of difficulty at most
        PUBLISHED_MAX_DIFFICULTY first (harder ones only when none is that easy), each group by score_0_to_1
        descending, then difficulty ascending, then overall_rating_0_to_10 descending, then node_id; no
        exploration term."""
        nodes = [n for n in self.frontier() if n["node_id"] not in exclude]
        return sorted(nodes, key=lambda n: (int(n["action"]["difficulty_1_to_5"]) > PUBLISHED_MAX_DIFFICULTY,
                                            -float(n["action"]["score_0_to_1"]), int(n["action"]["difficulty_1_to_5"]),
                                            -float(n["overall_rating_0_to_10"]), str(n["node_id"])))

    def ranked(self, weights: SelectionWeights, visits: dict[str, int]) -> list[dict[str, Any]]:
        """The frontier in the order `weights.rule` ranks it, best first (for reports and the live view)."""
        if getattr(weights, "rule", "weighted") == "published":
            return self.published_order()
        return [n for _, n in self.ranked_frontier(weights, visits)]

    def select(
        self,
        weights: SelectionWeights,
        visits: dict[str, int],
        rng: random.Random,
        exclude: set[str] | frozenset[str] = frozenset(),
    ) -> dict[str, Any] | None:
        """The next node to refine (None if the frontier is empty). Rule "weighted": the highest V; ties (within
        1e-9) are broken by `rng` over the tied nodes in tree order, so a seeded RNG gives the same choice every
        time; the RNG is only drawn from when there is a tie. Rule "published": the first of published_order."""
        if getattr(weights, "rule", "weighted") == "published":
            order = self.published_order(exclude)
            return order[0] if order else None
        ranked = [(v, n) for v, n in self.ranked_frontier(weights, visits) if n["node_id"] not in exclude]
        if not ranked:
            return None
        best = ranked[0][0]
        tied = [n for v, n in ranked if v >= best - _TIE_EPS]
        return tied[0] if len(tied) == 1 else tied[rng.randrange(len(tied))]

    # ---- what the loop writes ------------------------------------------------------------------------------

    def attach_solution(
        self,
        node_id: str,
        solution_id: str,
        parent_solution_id: str | None,
        status: str,
        score: float,
        score_name: str = "speedup_geomean",
        round_: int = 0,
    ) -> None:
        """Attach the cycle's best candidate to a node (it leaves the frontier; its children become
        selectable) and make it the active leaf. Attaching again replaces the reference (the loop is trusted;
        edits can never do this)."""
        n = self._node(node_id)
        if not solution_id:
            raise WorldModelError("attach_solution needs a non-empty solution_id")
        value = number(score, 0.0, "score")
        if math.isinf(value):
            raise WorldModelError("attach_solution: score must be finite")
        n["solution_ref"] = {
            "solution_id": str(solution_id),
            "parent_solution_id": parent_solution_id,
            "eval": {"status": str(status), "score": value, "score_name": score_name},
        }
        n["ksearch"]["status"] = OPEN
        n["last_updated_round"] = max(0, int(round_))
        self.data["decision_tree"]["active_leaf_id"] = node_id

    def record_counters(self, node_id: str, counters: dict[str, Any], round_: int) -> list[dict[str, Any]]:
        """The profiled counters of the node's solution (worldmodel/counters.py): its impact ratings move by the named
        rules that hold, which are kept under `counter_rules` (with the patterns they favour or not), the digest
        under `counters`. Replaces an earlier measurement of the node. Returns the fired rules."""
        from ksearch.worldmodel.counters import measured_impacts

        n = self._node(node_id)
        base = n.get("impacts_guessed") or n["impacts"]
        impacts, fired = measured_impacts(base, counters)
        n["impacts_guessed"] = copy.deepcopy(base)  # the proposer's guess, kept beside the measurement
        n["impacts"] = impacts
        n["counters"] = copy.deepcopy(counters)
        n["counter_rules"] = [f.to_json() for f in fired]
        n["last_updated_round"] = max(0, int(round_))
        return [f.to_json() for f in fired]

    def mark_too_hard(self, node_id: str, note: str, round_: int) -> None:
        """A cycle on this node failed entirely: it leaves the frontier, its difficulty goes up by one (max 5)
        and the reason is appended to its notes (kept, so the proposer remembers the failure)."""
        n = self._node(node_id)
        if n["node_id"] == self.root_id:
            raise WorldModelError("the root cannot be marked too hard")
        n["ksearch"]["status"] = TOO_HARD
        n["ksearch"]["too_hard_round"] = max(0, int(round_))
        if n["action"] is not None:
            n["action"]["difficulty_1_to_5"] = min(5, int(n["action"]["difficulty_1_to_5"]) + 1)
        line = f"TOO_HARD (round {int(round_)}): {note}".strip()
        n["notes"] = f"{n['notes']}\n{line}" if n["notes"] else line
        n["last_updated_round"] = max(0, int(round_))

    def close(self, node_id: str, note: str, round_: int) -> None:
        """Take a node off the frontier without the too-hard verdict (e.g. abandoned by backtracking)."""
        n = self._node(node_id)
        if n["node_id"] == self.root_id:
            raise WorldModelError("the root cannot be closed")
        n["ksearch"]["status"] = CLOSED
        if note:
            line = f"CLOSED (round {int(round_)}): {note}"
            n["notes"] = f"{n['notes']}\n{line}" if n["notes"] else line
        n["last_updated_round"] = max(0, int(round_))

    def apply_edits(
        self,
        edits: dict[str, Any] | str,
        round_: int,
        max_inserts: int = 3,
        require_child_of: str | None = None,
    ) -> list[str]:
        """Apply the proposer's edit {"active_leaf_id": ..., "ops": [...]} all or nothing; see
        worldmodel/edits.py. Raises EditRejected (model unchanged) with a reason the proposer can act on.
        Returns what changed."""
        if require_child_of is not None:
            self._node(require_child_of)
        new_data, changes = apply_edit_ops(self.data, edits, round_, max_inserts, require_child_of)
        self.data = new_data
        return changes

    def fallback_edit(
        self, node_id: str | None, why: str = "the proposer's edits were refused"
    ) -> dict[str, Any]:
        """The deterministic edit for when the proposer gives no follow-up: for a solved node without an open
        child, one minimal child "Refine: <title>" (same action, score lowered by 10%, confidence halved, marked
        `auto_follow_up`); otherwise no ops. Always accepted by `apply_edits`."""
        if node_id is None or not self.has_node(node_id):
            return {"active_leaf_id": None, "ops": []}
        n = self._node(node_id)
        if solution_id(n) is None or not self.require_follow_up(node_id) or n["action"] is None:
            return {"active_leaf_id": node_id, "ops": []}
        act = copy.deepcopy(n["action"])
        title = str(act["title"])
        act["title"] = title if title.startswith("Refine: ") else f"Refine: {title}"
        act["score_0_to_1"] = round(0.9 * float(act["score_0_to_1"]), 4)
        act["rationale"] = f"automatic follow-up: tune the solved step further ({why})"
        child = {
            "decision": n["decision"],
            "choice": n["choice"] if n["choice"].startswith("refine ") else f"refine {n['choice']}".strip(),
            "action": act,
            "impacts": copy.deepcopy(n.get("impacts_guessed") or n["impacts"]),
            "overall_rating_0_to_10": n["overall_rating_0_to_10"],
            "confidence_0_to_1": round(0.5 * float(n["confidence_0_to_1"]), 4),
            "notes": "FOLLOW_THROUGH: automatic fallback child",
        }
        extras = {k: copy.deepcopy(v) for k, v in n.items() if k not in child and k not in NODE_KEYS}
        for own in ("ksearch", "counters", "counter_rules", "impacts_guessed"):  # the parent's, not the child's
            extras.pop(own, None)
        child.update(extras)
        child["auto_follow_up"] = True
        op = {"op": "insert_node", "parent_id": node_id, "parent_solution_id": solution_id(n), "node": child}
        return {"active_leaf_id": node_id, "ops": [op]}

    def annotate_root(self, heading: str, body: str) -> None:
        """Keep a text in the root's notes under `heading` (replacing an earlier one under it), as the published
        implementation keeps the analysis there for every later world-model prompt."""
        root = self._node(self.root_id)
        marker = f"{heading}:"
        notes = str(root["notes"] or "")
        if marker in notes:
            notes = notes[: notes.index(marker)].rstrip()
        root["notes"] = (notes + "\n\n" if notes else "") + f"{marker}\n{body.strip()}"

    def require_follow_up(self, solved_node_id: str) -> bool:
        """True if the node has no open child yet: the next edit must insert one
        (apply_edits(require_child_of=))."""
        return not has_open_child(self.data, solved_node_id)

    # ---- reading results -----------------------------------------------------------------------------------

    def best_node(self) -> dict[str, Any] | None:
        """The solved node with the highest eval score (the first in tree order on a tie), or None."""
        best: dict[str, Any] | None = None
        for n in self._nodes():
            if solution_id(n) is not None and (
                best is None or n["solution_ref"]["eval"]["score"] > best["solution_ref"]["eval"]["score"]
            ):
                best = n
        return None if best is None else copy.deepcopy(best)

    def best_path(self) -> list[dict[str, Any]]:
        """Root -> the node holding the best solution (just the root when nothing is solved)."""
        best = self.best_node()
        return self.path(best["node_id"] if best else self.root_id)

    def stats(self) -> dict[str, Any]:
        nodes = self._nodes()
        open_ids = self._open_ids()
        depths = {n["node_id"]: len(self.path(n["node_id"])) - 1 for n in nodes}
        best = self.best_node()
        waiting = [
            n
            for n in nodes
            if n["action"] is not None
            and solution_id(n) is None
            and not is_closed(n)
            and n["node_id"] not in open_ids
            and n["node_id"] != self.root_id
        ]
        return {
            "nodes": len(nodes),
            "solved": sum(1 for n in nodes if solution_id(n) is not None),
            "open": len(open_ids),
            "waiting": len(waiting),  # actions whose parent is not implemented yet
            "too_hard": sum(1 for n in nodes if n["ksearch"]["status"] == TOO_HARD),
            "closed": sum(1 for n in nodes if n["ksearch"]["status"] == CLOSED),
            "leaves": sum(1 for kids in self._children_map().values() if not kids),
            "max_depth": max(depths.values()),
            "top_level_branches": len(self._children_map()[self.root_id]),
            "best_node_id": best["node_id"] if best else None,
            "best_score": best["solution_ref"]["eval"]["score"] if best else None,
            "best_depth": depths[best["node_id"]] if best else None,
        }
