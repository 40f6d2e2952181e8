"""K-Search: select an action from the world model, refine it locally until stagnation, update the world model.

This module is the only place that knows the order of the steps (docs/architecture.md). One evaluation is one
commit; a kill loses at most the evaluation in flight, and `resume` continues from the last commit exactly.
"""

from __future__ import annotations

import contextlib
from typing import Any

from ksearch.config import SelectionWeights
from ksearch.policy.base import Attempt, Feedback, ImplementRequest, Mode
from ksearch.search.bookkeeping import IMPROVEMENT, SearchSetup, StopSearch, StrategyBase
from ksearch.search.state import Cycle, LoopState
from ksearch.worldmodel import EditRejected, WorldModel, WorldModelError
from ksearch.worldmodel.tidy import tidy_tree

EDIT_RETRIES = 2
MAX_SKIPS = 12  # proposals in a row that produce nothing new end a cycle (duplicates cost no budget)


class KSearch(StrategyBase):
    def __init__(self, setup: SearchSetup, state: LoopState, world_model: WorldModel | None) -> None:
        super().__init__(setup, state)
        self.wm = world_model
        self.weights = setup.weights or SelectionWeights()

    # -- setup ---------------------------------------------------------------------------------------------------
    def _init(self) -> None:
        ctx = self.s.ctx
        if not self.state.analysis:
            self.state.analysis = self.call_policy(self.s.policy.analyse, ctx) or ""
        if self.wm is None:
            errors = self.state.policy_errors
            data = self.call_policy(self.s.policy.init_world_model, ctx, self.state.analysis)
            why = "the proposer's call failed" if self.state.policy_errors > errors else "the proposer gave none"
            if data:
                # A small model's tree may repeat ids or lose parents: mend the links (said), keep its content.
                data, mended = tidy_tree(data)
                if mended:
                    self.event("world_model_tidied", {"changes": mended[:20], "count": len(mended)})
            try:
                self.wm = WorldModel.from_json(data) if data else None
            except WorldModelError as exc:
                self.event("policy_error", {"message": f"initial world model rejected: {exc}"})
                why = f"the proposer's world model was rejected: {str(exc)[:300]}"
                self.wm = None
            if self.wm is None:
                # Deterministic fallback: the offline policy's knowledge-driven actions; said, not silent, since a
                # weak model's unusable tree would otherwise pass for the search's own.
                from ksearch.policy.offline import OfflinePolicy

                if self.s.policy.name != "offline":
                    self.event("world_model_fallback", {"message": f"the offline world model stands in: {why}"})
                self.wm = WorldModel.from_json(OfflinePolicy().init_world_model(ctx, self.state.analysis))
            self.state.phase = "search"
            self.write_state(self.wm.to_json(), "initial")

    # -- the loop ------------------------------------------------------------------------------------------------
    def run(self) -> LoopState:
        try:
            self._init()
            self.submit_start()
            while self.budget_left():
                if self.state.cycle is None and not self._select():
                    self.event("frontier_empty", {})
                    self.state.phase = "done"
                    break
                self._attempt()
        except StopSearch:
            pass
        if self.state.cycle is not None and self.state.cycle.attempts and self.finished():
            # Attach what the interrupted cycle found, so the tree shows it (its edit's call may hit a cap or fail
            # the run: the cycle's solution is attached all the same).
            with contextlib.suppress(StopSearch):
                self._end_cycle()
        self.write_state(self.wm.to_json() if self.wm else None, "final")
        return self.state

    def _select(self) -> bool:
        assert self.wm is not None
        exclude = set()
        for root in self.state.excluded:
            exclude |= self._subtree(root)
        node = self.wm.select(self.weights, self.state.visits, self.s.ctx.rng, exclude=exclude)
        if node is None and exclude:
            self.state.excluded = []  # every alternative is exhausted: allow the set-aside branches again
            node = self.wm.select(self.weights, self.state.visits, self.s.ctx.rng)
        if node is None:
            # Ask the policy to grow the tree from what exists (an expansion edit without a cycle).
            self._edit([], None)
            node = self.wm.select(self.weights, self.state.visits, self.s.ctx.rng)
            if node is None:
                return False
        self.state.cycle = Cycle(node_id=node["node_id"], best_at_start=self.state.best_score)
        top = [{"node_id": n["node_id"], "title": (n.get("action") or {}).get("title"), "priority": v}
               for v, n in self.wm.ranked_frontier(self.weights, self.state.visits)[:3]]
        self.event("select", {"node_id": node["node_id"], "title": (node.get("action") or {}).get("title"),
                              "priority": self.wm.priority(node["node_id"], self.weights, self.state.visits),
                              "frontier": top})
        self.write_state()
        return True

    def _subtree(self, node_id: str) -> set[str]:
        assert self.wm is not None
        out, todo = set(), [node_id]
        while todo:
            n = todo.pop()
            out.add(n)
            todo.extend(c["node_id"] for c in self.wm.children(n))
        return out

    def _parent_solution(self, node: dict[str, Any]) -> tuple[str | None, dict[str, Any] | None]:
        """The code an action builds on: the parent's attached solution, or the starting kernel at the root."""
        assert self.wm is not None
        parent = self.wm.parent(node["node_id"])
        sol = ((parent or {}).get("solution_ref") or {}).get("solution_id") if parent else None
        cid = sol or self.state.start_candidate
        if not cid:
            return None, None
        row = self.store.candidate(cid)
        return cid, row.params

    def _attempt(self) -> None:
        assert self.wm is not None and self.state.cycle is not None
        cyc = self.state.cycle
        node = self.wm.node(cyc.node_id)
        mode: Mode = "first"
        if cyc.attempts:
            mode = "improve" if any(a.status == "passed" for a in cyc.attempts) else "debug"
        parent_cid, parent_params = self._parent_solution(node)
        base_cid = cyc.best_candidate if mode == "improve" else (cyc.last_candidate if mode == "debug" else parent_cid)
        base_source = self.store.candidate(base_cid).source(self.store.path) if base_cid else None
        best_source = (self.store.candidate(self.state.best_candidate).source(self.store.path)
                       if self.state.best_candidate else None)
        request = ImplementRequest(
            action=node, mode=mode, parent_source=base_source,
            parent_params=(cyc.best_params if mode == "improve" and cyc.best_params else parent_params),
            feedback=Feedback(**cyc.last_feedback) if cyc.last_feedback else None,
            history=list(cyc.attempts), best_source=best_source, best_score=self.state.best_score)
        self.s.ctx.round = self.state.round
        out = self.call_policy(self.s.policy.implement, self.s.ctx, request)
        self.state.visits[cyc.node_id] = self.state.visits.get(cyc.node_id, 0) + 1
        if out is None:
            cyc.consecutive_skips += 1
            cyc.no_improve += 1
            cyc.attempts.append(Attempt("", cyc.node_id, mode, "no_candidate", 0.0, "the policy produced no code"))
        else:
            source, params = out
            title = (node.get("action") or {}).get("title")
            attempt, result = self.submit(source, params, cyc.node_id, mode, base_cid, title)
            if result is None:
                cyc.consecutive_skips += 1
                cyc.no_improve += 1
            else:
                cyc.consecutive_skips = 0
                cyc.last_candidate = attempt.candidate_id
                cyc.last_feedback = Feedback.from_result(result).to_json()
                if result.passed and result.score > cyc.best_score * (1 + IMPROVEMENT):
                    attempt.improved = True
                    cyc.best_candidate, cyc.best_score, cyc.best_params = attempt.candidate_id, result.score, params
                    cyc.no_improve = 0
                else:
                    cyc.no_improve += 1
            cyc.attempts.append(attempt)
        if cyc.no_improve >= self.s.stagnation_window or cyc.consecutive_skips >= MAX_SKIPS:
            self._end_cycle()
        else:
            self.write_state()

    def _end_cycle(self) -> None:
        assert self.wm is not None and self.state.cycle is not None
        cyc = self.state.cycle
        best_before = cyc.best_at_start
        if cyc.best_candidate:
            parent_cid, _ = self._parent_solution(self.wm.node(cyc.node_id))
            self.wm.attach_solution(cyc.node_id, cyc.best_candidate, parent_cid, "passed", cyc.best_score,
                                    round_=self.state.round)
            require = cyc.node_id
        elif not any(a.status not in ("duplicate", "no_candidate") for a in cyc.attempts):
            # Nothing new was tried (only repeats of earlier candidates): the idea is exhausted, not too hard.
            self.wm.close(cyc.node_id, "exhausted: the proposer had nothing new for this action", self.state.round)
            self.event("exhausted", {"node_id": cyc.node_id})
            require = None
        else:
            last = cyc.attempts[-1].status if cyc.attempts else "none"
            self.wm.mark_too_hard(cyc.node_id, f"no attempt passed (last: {last})", self.state.round)
            self.event("too_hard", {"node_id": cyc.node_id})
            require = None
        evaluated = [a for a in cyc.attempts if a.candidate_id and a.status not in ("duplicate", "no_candidate")]
        self._edit(evaluated or cyc.attempts, require)
        improved = self.state.best_score > best_before * (1 + IMPROVEMENT)
        self.state.cycles_without_improvement = 0 if improved else self.state.cycles_without_improvement + 1
        self.event("cycle_end", {"node_id": cyc.node_id, "best_score": cyc.best_score, "attempts": len(cyc.attempts),
                                 "improved_global": improved})
        if self.state.cycles_without_improvement >= self.s.stagnation_window:
            branch = self._branch_root(cyc.node_id)
            if branch and branch not in self.state.excluded:
                self.state.excluded.append(branch)
            self.state.cycles_without_improvement = 0
            self.event("backtrack", {"from_branch": branch, "reason": "best score flat for "
                                     f"{self.s.stagnation_window} cycles"})
        self.state.cycle = None
        self.state.round += 1
        self.write_state(self.wm.to_json(), f"round {self.state.round}")

    def _branch_root(self, node_id: str) -> str | None:
        """The child of the root that a node descends from: the branch a backtrack sets aside."""
        assert self.wm is not None
        cur = self.wm.node(node_id)
        while cur.get("parent_id") and cur["parent_id"] != self.wm.root_id:
            cur = self.wm.node(cur["parent_id"])
        return cur["node_id"] if cur.get("parent_id") == self.wm.root_id else None

    def _edit(self, cycle: list[Attempt], require_child_of: str | None) -> None:
        assert self.wm is not None
        rejection: str | None = None
        for _ in range(EDIT_RETRIES + 1):
            edits = self.call_policy(self.s.policy.update, self.s.ctx, self.wm.to_json(), cycle, rejection)
            if edits is None:
                break
            try:
                changes = self.wm.apply_edits(edits, self.state.round, require_child_of=require_child_of)
            except EditRejected as exc:
                rejection = str(exc)
                self.event("edit_rejected", {"reason": rejection})
                continue
            self.event("edit", {"changes": changes})
            return
        if require_child_of is not None:
            # Deterministic fallback so a solved node always has a follow-up: the offline policy's edit.
            from ksearch.policy.offline import OfflinePolicy

            fallback = OfflinePolicy().update(self.s.ctx, self.wm.to_json(), cycle, rejection)
            if self.s.policy.name != "offline":
                self.event("edit_fallback", {"node_id": require_child_of, "message": "the offline policy's edit "
                                             "stands in for the proposer's: " + (rejection or "none was given")})
            try:
                self.wm.apply_edits(fallback, self.state.round, require_child_of=require_child_of)
            except EditRejected as exc:
                self.event("edit_rejected", {"reason": f"fallback: {exc}"})
