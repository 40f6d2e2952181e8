"""The built-in offline proposer: knowledge-driven K-Search without a network.

Actions are the knowledge base's optimisation patterns that apply to the task's kind and backend and that some template
family realises. Implementations are rendered from those families: the first attempt at an action switches the
pattern on in the parent's parameters, a debug attempt after a failure steps back to a neighbouring configuration, an
improve attempt after a pass mutates the cycle's best. Ratings move with the measured speedups.
"""

from __future__ import annotations

import math
from typing import Any

from ksearch.policy.base import Attempt, CycleEvidence, ImplementRequest, PolicyContext
from ksearch.policy.templates import TemplateFamily, families_for
from ksearch.worldmodel import WorldModel
from ksearch.worldmodel.counters import pattern_adjustment

#: Used when the knowledge layer is absent or lacks an entry: neutral priors.
_DEFAULT_PRIOR = {"rating_0_to_10": 5, "difficulty_1_to_5": 3, "expected_vs_baseline_factor": 1.2,
                  "confidence_0_to_1": 0.3}


def _patterns() -> dict[str, dict[str, Any]]:
    try:
        from ksearch.knowledge import load_patterns  # type: ignore[attr-defined,unused-ignore]
    except ImportError:
        return {}
    try:
        return {p["id"]: p for p in load_patterns()}
    except Exception:  # a broken knowledge file must not stop the offline search; priors fall back to neutral
        return {}


def _key(family: str, params: dict[str, Any]) -> str:
    return family + "|" + ",".join(f"{k}={params[k]}" for k in sorted(params))


class OfflinePolicy:
    name = "offline"

    def __init__(self) -> None:
        self.tried: set[str] = set()

    # -- protocol ------------------------------------------------------------------------------------------------
    def analyse(self, ctx: PolicyContext) -> str:
        task, backend = ctx.task, ctx.backend
        fams = families_for(task.name, backend.name)
        lines = [f"Task {task.name} ({task.kind}) on {backend.name}."]
        for w in task.select_workloads(backend.tier):
            flops, nbytes = task.flops(w), task.bytes_moved(w)
            intensity = flops / max(nbytes, 1)
            regime = "bandwidth-bound" if intensity < 20 else "compute-bound"
            lines.append(f"- {w.name}: {flops:.3g} flop, {nbytes:.3g} bytes, {intensity:.2f} flop/byte: {regime}")
        lines.append("Template families: " + (", ".join(f.id for f in fams) or "none (only the starting kernel)"))
        return "\n".join(lines)

    def _actions(self, ctx: PolicyContext) -> list[dict[str, Any]]:
        known = _patterns()
        boosted = set((ctx.port_context or {}).get("patterns", []))
        seen: dict[str, dict[str, Any]] = {}
        for fam in families_for(ctx.task.name, ctx.backend.name):
            for pid in fam.patterns:
                if pid in seen:
                    continue
                pat = known.get(pid, {})
                prior = {**_DEFAULT_PRIOR, **(pat.get("prior") or {})}
                rating = float(prior["rating_0_to_10"]) + (2.0 if pid in boosted else 0.0)
                seen[pid] = {
                    "title": pat.get("title") or pid.replace("_", " "),
                    "description": pat.get("description") or f"apply {pid} with {fam.id}",
                    "difficulty_1_to_5": int(prior["difficulty_1_to_5"]),
                    "score_0_to_1": 0.0,
                    "expected_vs_baseline_factor": float(prior["expected_vs_baseline_factor"]),
                    "rationale": pat.get("expected_impact") or fam.description,
                    "overall_rating_0_to_10": min(10.0, rating),
                    "confidence_0_to_1": float(prior["confidence_0_to_1"]),
                    "impacts": pat.get("impacts"),
                    "pattern_id": pid,
                }
        return list(seen.values())

    def init_world_model(self, ctx: PolicyContext, analysis: str) -> dict[str, Any]:
        actions = self._actions(ctx)
        summary = analysis.splitlines()[0] if analysis else ctx.task.name
        return WorldModel.new(summary, actions).to_json()

    def _family(self, ctx: PolicyContext, pattern: str | None, parent_family: str | None) -> TemplateFamily | None:
        fams = families_for(ctx.task.name, ctx.backend.name)
        if not fams:
            return None
        # Stay in the parent's family when it realises the pattern: refinements compose.
        for f in fams:
            if f.id == parent_family and (pattern is None or pattern in f.patterns):
                return f
        for f in fams:
            if pattern in f.patterns:
                return f
        return fams[0]

    def implement(self, ctx: PolicyContext, request: ImplementRequest) -> tuple[str, dict[str, Any]] | None:
        pattern = request.action.get("pattern_id") or (request.action.get("action") or {}).get("pattern_id")
        parent = dict(request.parent_params or {})
        fam = self._family(ctx, pattern, parent.get("family"))
        if fam is None:
            return None
        base = {k: v for k, v in parent.items() if k in fam.params} if parent.get("family") == fam.id else {}
        history = [a for a in request.history if a.params.get("family") == fam.id]
        if request.mode == "first":
            params = fam.realise(pattern, base, ctx.rng) if pattern else {**fam.default(), **base}
        elif request.mode == "debug":
            # Back off from the failing configuration towards the last good one (or the parent).
            good = [a for a in history if a.status == "passed"]
            anchor = good[-1].params if good else (base or fam.default())
            params = fam.mutate({k: v for k, v in anchor.items() if k in fam.params}, ctx.rng, n=1)
        else:
            passed = [a for a in history if a.status == "passed"]
            best = max(passed, key=lambda a: a.score).params if passed else base
            params = fam.mutate({k: v for k, v in best.items() if k in fam.params}, ctx.rng,
                                n=1 if ctx.rng.random() < 0.7 else 2)
        if pattern and pattern in fam.pattern_params and request.mode != "first":
            params = fam.realise(pattern, params, ctx.rng)
        for _ in range(30):
            if _key(fam.id, params) not in self.tried:
                break
            params = fam.mutate(params, ctx.rng, n=ctx.rng.choice((1, 2)))
        self.tried.add(_key(fam.id, params))
        return fam.source(params), {"family": fam.id, **params}

    def update(self, ctx: PolicyContext, world_model: dict[str, Any], cycle: list[Attempt],
               rejection: str | None, evidence: CycleEvidence | None = None) -> dict[str, Any]:
        nodes = {n["node_id"]: n for n in world_model["decision_tree"]["nodes"]}
        ops: list[dict[str, Any]] = []
        if not cycle:
            return {"active_leaf_id": world_model["decision_tree"].get("active_leaf_id"), "ops": ops}
        node_id = cycle[0].node_id
        node = nodes.get(node_id, {})
        action = node.get("action") or {}
        passed = [a for a in cycle if a.status == "passed"]
        best = max((a.score for a in passed), default=0.0)
        expected = float(action.get("expected_vs_baseline_factor") or 1.0)
        if passed:
            rating = max(0.0, min(10.0, 5.0 + 4.0 * math.log2(max(best, 1e-3))))
            notes = (f"CURRENT: best {best:.3f}x after {len(cycle)} attempts ({len(passed)} passed). "
                     f"FOLLOW_THROUGH: refine the best configuration with the next pattern. "
                     f"UPDATE_BELIEF: measured {best:.3f}x vs expected {expected:.2f}x.")
            if best > 0 and (best / expected > 2 or expected / best > 2):
                notes += f" PERF_GAP: prediction {expected:.2f}x, measurement {best:.3f}x."
            ops.append({"op": "update_node", "node_id": node_id, "patch": {
                "overall_rating_0_to_10": rating, "confidence_0_to_1": min(1.0, 0.4 + 0.1 * len(passed)),
                "notes": notes, "action": {**action, "score_0_to_1": min(1.0, best / max(best, expected, 1.0))}}})
            # Follow-up children: the other applicable patterns, highest prior first, not already on this path.
            for a in self._follow_ups(ctx, nodes, node_id)[:2]:
                ops.append(_insert(a, node, max(best, 1e-3) * 1.1, f"follow-up of {node_id}"))
        else:
            ops.append({"op": "update_node", "node_id": node_id, "patch": {
                "overall_rating_0_to_10": max(0.0, float(node.get("overall_rating_0_to_10") or 5) - 3),
                "confidence_0_to_1": min(1.0, float(node.get("confidence_0_to_1") or 0.3) + 0.2),
                "notes": f"CURRENT: all {len(cycle)} attempts failed ({cycle[-1].status}). FOLLOW_THROUGH: none. "
                         "UPDATE_BELIEF: too hard with the current templates."}})
        return {"active_leaf_id": node_id, "ops": ops}

    def refresh(self, ctx: PolicyContext, world_model: dict[str, Any], needs: list[str],
                rejection: str | None) -> dict[str, Any]:
        """Supply the frontier from the knowledge patterns: follow-ups under the best node when it has no open child,
        then, while fewer than 3 actions are ready to try, under the next best solved nodes and the root. Scores
        stay as the patterns' priors give them (none is claimed above 0.5 without a measurement)."""
        wm = WorldModel.from_json(world_model)
        nodes = {n["node_id"]: n for n in wm.nodes()}
        solved = sorted((n for n in nodes.values() if (n.get("solution_ref") or {}).get("solution_id")),
                        key=lambda n: -float(n["solution_ref"]["eval"]["score"]))
        ready = len(wm.frontier())
        ops: list[dict[str, Any]] = []
        for i, target in enumerate([*solved, nodes[wm.root_id]]):
            tid = target["node_id"]
            best_needs = i == 0 and tid != wm.root_id and wm.require_follow_up(tid)
            added = 0
            if not _wanted(len(ops), ready, best_needs, added):
                continue
            taken = {c.get("pattern_id") for c in wm.children(tid)}
            ref = target.get("solution_ref") or {}
            for a in self._follow_ups(ctx, nodes, tid):
                if not _wanted(len(ops), ready, best_needs, added):
                    break
                if a["pattern_id"] in taken:
                    continue
                expected = (max(float(ref["eval"]["score"]), 1e-3) * 1.1 if ref.get("solution_id")
                            else float(a["expected_vs_baseline_factor"]))
                ops.append(_insert(a, target, expected, f"follow-up of {tid} (frontier refresh)"))
                added += 1
        return {"active_leaf_id": None, "ops": ops}

    def _follow_ups(self, ctx: PolicyContext, nodes: dict[str, dict[str, Any]], node_id: str) -> list[dict[str, Any]]:
        """The applicable patterns not on the path to the node, highest rating first (ties in a seeded order): the
        pattern's prior, moved by what the node's profiled counters say of it (worldmodel/counters.py), which
        carries into the rating of the follow-up inserted for it."""
        on_path = set()
        cur: dict[str, Any] | None = nodes.get(node_id)
        while cur:
            pid = cur.get("pattern_id") or (cur.get("action") or {}).get("pattern_id")
            if pid:
                on_path.add(pid)
            cur = nodes.get(cur.get("parent_id") or "")
        cands = [a for a in self._actions(ctx) if a["pattern_id"] not in on_path]
        measured = nodes.get(node_id)
        for a in cands:
            adjust = pattern_adjustment(measured, a["pattern_id"], a.get("impacts"))
            if adjust:
                a["overall_rating_0_to_10"] = max(0.0, min(10.0, a["overall_rating_0_to_10"] + adjust))
                a["counter_note"] = (f"counters of {node_id} moved the rating by {adjust:+.1f} ("
                                     + ", ".join(f["rule"] for f in (measured or {}).get("counter_rules") or []) + ")")
        ctx.rng.shuffle(cands)
        cands.sort(key=lambda a: -a["overall_rating_0_to_10"])
        return cands

    def state(self) -> dict[str, Any]:
        return {"tried": sorted(self.tried)}

    def load_state(self, state: dict[str, Any]) -> None:
        self.tried = set(state.get("tried", []))


def _wanted(made: int, ready: int, best_needs: bool, added: int) -> bool:
    """Whether a refresh adds one more: at most 3 in all, up to 2 under a best node without an open child, and
    more while fewer than 3 actions are ready to try."""
    return made < 3 and ((best_needs and added < 2) or ready + made < 3)


def _insert(a: dict[str, Any], parent: dict[str, Any], expected: float, notes: str) -> dict[str, Any]:
    """An insert_node op for pattern action `a` under `parent`."""
    return {"op": "insert_node", "parent_id": parent["node_id"],
            "parent_solution_id": (parent.get("solution_ref") or {}).get("solution_id"), "node": {
                "action": {**{k: a[k] for k in ("title", "description", "difficulty_1_to_5", "score_0_to_1",
                                                "rationale")}, "expected_vs_baseline_factor": expected},
                "overall_rating_0_to_10": a["overall_rating_0_to_10"], "confidence_0_to_1": a["confidence_0_to_1"],
                "impacts": a.get("impacts"), "pattern_id": a["pattern_id"],
                "notes": notes + (f"; {a['counter_note']}" if a.get("counter_note") else "")}}


def make_offline_policy() -> OfflinePolicy:
    return OfflinePolicy()


__all__ = ["OfflinePolicy", "make_offline_policy"]

