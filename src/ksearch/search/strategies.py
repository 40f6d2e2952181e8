"""Comparison strategies with the same policy and budget as K-Search, without a world model.

- greedy: hill climbing from the best candidate so far, one random applicable action at a time.
- evolve: OpenEvolve-style MAP-Elites with islands and ring migration, binned on performance-relevant descriptors
  (tiling, threads, vector width, layout, fusion), never on code length.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from ksearch.policy.base import Feedback, ImplementRequest, Mode
from ksearch.search.bookkeeping import SearchSetup, StopSearch, StrategyBase
from ksearch.search.state import LoopState

ISLANDS = 3
MIGRATE_EVERY = 10


def descriptor(params: dict[str, Any], source: str) -> str:
    """Cell of the MAP-Elites grid. Template candidates bin on their family's declared descriptors; free-form code
    (an LLM's) bins on features read from the source."""
    fam = params.get("family")
    if fam and fam != "start":
        from ksearch.policy.templates import all_families

        for f in all_families():
            if f.id == fam:
                keys = f.descriptors or tuple(sorted(f.params))[:3]
                return fam + ":" + ",".join(f"{k}={params.get(k)}" for k in keys)
    shared = "smem" if re.search(r"__shared__|threadgroup\s+\w", source) else "nosmem"
    vec = "vec" if re.search(r"float4|half2|__half2|uint4|half4|float2|alignas", source) else "scalar"
    mma = "mma" if re.search(r"mma\.sync|wgmma|simdgroup_matrix", source) else "nomma"
    threads = re.search(r"threadgroup\s*=\s*\(\s*(\d+)", source)
    tb = threads.group(1) if threads else "?"
    fused = "compiled" if "mx.compile" in source else "plain"
    return f"free:{shared},{vec},{mma},t{tb},{fused}"


@dataclass
class _Proposed:
    source: str
    params: dict[str, Any]
    node_id: str
    title: str | None


class _ActionStrategy(StrategyBase):
    """Shared by greedy and evolve: the applicable actions come from the policy's initial world model."""

    def __init__(self, setup: SearchSetup, state: LoopState) -> None:
        super().__init__(setup, state)
        self.actions: list[dict[str, Any]] = state.strategy.get("actions", [])

    def _init(self) -> None:
        if not self.state.analysis:
            self.state.analysis = self.call_policy(self.s.policy.analyse, self.s.ctx) or ""
        if not self.actions:
            wm = self.call_policy(self.s.policy.init_world_model, self.s.ctx, self.state.analysis) or {}
            nodes = (wm.get("decision_tree") or {}).get("nodes") or []
            if isinstance(nodes, dict):
                nodes = list(nodes.values())
            self.actions = [n for n in nodes if n.get("action")]
            if not self.actions:
                if self.s.policy.name != "offline":
                    self.event("world_model_fallback", {"message": "the proposer gave no actions: one generic "
                                                        "action (improve the kernel) stands in"})
                self.actions = [{"node_id": "any", "action": {"title": "improve the kernel"}}]
            self.state.strategy["actions"] = self.actions
        self.state.phase = "search"
        self.write_state()

    def _propose(self, parent_cid: str | None, mode: Mode, feedback: dict[str, Any] | None) -> None:
        p = self._proposal(parent_cid, mode, feedback)
        if p is None:
            self.state.strategy["skips"] = self.state.strategy.get("skips", 0) + 1
            self._after(None, None, None)
            return
        attempt, result = self.submit(p.source, p.params, p.node_id, mode, parent_cid, p.title)
        self._after(attempt.candidate_id if result else None, result, p.params)

    def _proposal(self, parent_cid: str | None, mode: Mode, feedback: dict[str, Any] | None) -> _Proposed | None:
        """A random applicable action implemented on the parent by the policy (None: it gave no code)."""
        action = self.s.ctx.rng.choice(self.actions)
        parent = self.store.candidate(parent_cid) if parent_cid else None
        request = ImplementRequest(
            action=action, mode=mode, parent_source=parent.source(self.store.path) if parent else None,
            parent_params=parent.params if parent else None,
            feedback=Feedback(**feedback) if feedback else None, history=[],
            best_source=None, best_score=self.state.best_score)
        out = self.call_policy(self.s.policy.implement, self.s.ctx, request)
        if out is None:
            return None
        source, params = out
        return _Proposed(source, params, str(action.get("node_id")), (action.get("action") or {}).get("title"))

    def _after(self, cid: str | None, result: Any, params: dict[str, Any] | None) -> None:
        raise NotImplementedError

    def run(self) -> LoopState:
        try:
            self._init()
            self.submit_start()
            skips = 0
            while self.budget_left():
                before = self.state.evaluations_done
                self.step()
                skips = skips + 1 if self.state.evaluations_done == before else 0
                if skips >= 50:  # the policy keeps proposing nothing new: the search space is exhausted
                    self.event("stalled", {"skips": skips})
                    self.state.phase = "done"
                    break
        except StopSearch:
            pass
        self.write_state()
        return self.state

    def step(self) -> None:
        raise NotImplementedError


class Greedy(_ActionStrategy):
    def step(self) -> None:
        best = self.state.best_candidate or self.state.start_candidate
        mode: Mode = "improve" if self.state.best_candidate else "first"
        self._propose(best, mode, self.state.strategy.get("last_feedback"))

    def _after(self, cid: str | None, result: Any, params: dict[str, Any] | None) -> None:
        if result is not None:
            self.state.strategy["last_feedback"] = Feedback.from_result(result).to_json()
        self.write_state()


class Evolve(_ActionStrategy):
    def _islands(self) -> list[dict[str, dict[str, Any]]]:
        isl = self.state.strategy.setdefault("islands", [{} for _ in range(ISLANDS)])
        return isl  # type: ignore[no-any-return]

    def step(self) -> None:
        islands = self._islands()
        i = self.state.strategy.get("turn", 0) % ISLANDS
        self.state.strategy["island"] = i
        elites = list(islands[i].values())
        if elites:
            # Tournament of two: pressure towards good elites while keeping diversity.
            a, b = self.s.ctx.rng.choice(elites), self.s.ctx.rng.choice(elites)
            parent = a if a["score"] >= b["score"] else b
            self._propose(parent["cid"], "improve", parent.get("feedback"))
        else:
            self._propose(self.state.start_candidate, "first", None)

    def _after(self, cid: str | None, result: Any, params: dict[str, Any] | None) -> None:
        i = self.state.strategy.get("island", 0)
        self.state.strategy["turn"] = self.state.strategy.get("turn", 0) + 1
        self.place(i, cid, result, params)

    def place(self, i: int, cid: str | None, result: Any, params: dict[str, Any] | None) -> None:
        """A verdict for island i: an elite of its cell if it beats the one there; every MIGRATE_EVERY evaluations
        each island's best moves to the next island."""
        islands = self._islands()
        if cid and result is not None and result.passed:
            cell = descriptor(params or {}, self.store.candidate(cid).source(self.store.path))
            cur = islands[i].get(cell)
            if cur is None or result.score > cur["score"]:
                islands[i][cell] = {"cid": cid, "score": result.score,
                                    "feedback": Feedback.from_result(result).to_json()}
        if self.state.evaluations_done and self.state.evaluations_done % MIGRATE_EVERY == 0:
            for j in range(ISLANDS):
                if islands[j]:
                    best_cell, best = max(islands[j].items(), key=lambda kv: kv[1]["score"])
                    dest = islands[(j + 1) % ISLANDS]
                    if best_cell not in dest or dest[best_cell]["score"] < best["score"]:
                        dest[best_cell] = dict(best)
            self.event("migration", {"evaluations_done": self.state.evaluations_done})
        self.write_state()
