"""K-Search: select an action from the world model, refine it locally until stagnation, update the world model.

This module is the only place that knows the order of the steps (docs/architecture.md). One evaluation is one
commit; a kill loses at most the evaluation in flight, and `resume` continues from the last commit exactly.
"""

from __future__ import annotations

import contextlib
from typing import Any

from ksearch.config import SelectionWeights
from ksearch.harness.profile import ProfileReport, feedback_line
from ksearch.harness.result import EvalResult
from ksearch.policy.base import Attempt, CycleEvidence, Feedback, ImplementRequest, Mode
from ksearch.search import frontier
from ksearch.search.bookkeeping import IMPROVEMENT, SearchSetup, StopSearch, StrategyBase
from ksearch.search.state import Cycle, LoopState
from ksearch.worldmodel import ANALYSIS_HEADING, EditRejected, WorldModel, WorldModelError
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
            if self.state.analysis.strip():
                self.wm.annotate_root(ANALYSIS_HEADING, self.state.analysis)
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
                self._end_cycle("budget")
        self.write_state(self.wm.to_json() if self.wm else None, "final")
        return self.state

    def _select(self, busy: frozenset[str] = frozenset()) -> bool:
        """Open a cycle on the best frontier node; `busy`: nodes whose cycles are open already (several evaluators
        refine the top N nodes at once)."""
        assert self.wm is not None
        self._refresh_frontier()
        exclude = set(busy)
        for root in self.state.excluded:
            exclude |= self._subtree(root)
        node = self.wm.select(self.weights, self.state.visits, self.s.ctx.rng, exclude=exclude)
        if node is None and exclude != busy:
            self.state.excluded = []  # every alternative is exhausted: allow the set-aside branches again
            node = self.wm.select(self.weights, self.state.visits, self.s.ctx.rng, exclude=busy)
        if node is None:
            return False
        parent_score = self._parent_score(node)
        self.state.cycle = Cycle(node_id=node["node_id"], best_at_start=self.state.best_score,
                                 parent_score=parent_score)
        top = [{"node_id": n["node_id"], "title": (n.get("action") or {}).get("title"),
                "priority": self.wm.priority(n["node_id"], self.weights, self.state.visits)}
               for n in self.wm.ranked(self.weights, self.state.visits)[:3]]
        self.event("select", {"node_id": node["node_id"], "title": (node.get("action") or {}).get("title"),
                              "priority": self.wm.priority(node["node_id"], self.weights, self.state.visits),
                              "parent_score": parent_score, "frontier": top})
        self.write_state()
        return True

    def _refresh_frontier(self) -> None:
        """Before every cycle, as published: when fewer than 3 actions are ready to try, or the best node has no open
        child, the proposer is asked for an edit that supplies them (and an action rated above 0.5), up to
        EDIT_RETRIES more times while something is missing; a deterministic minimal child is the last resort."""
        assert self.wm is not None
        needs = frontier.missing(self.wm)
        if not needs:
            return
        score_need = frontier.score_missing(self.wm)
        asked = needs + ([score_need] if score_need else [])
        refresh = getattr(self.s.policy, "refresh", None)
        changes: list[str] = []
        rejection: str | None = None
        wanted = asked
        for _ in range(EDIT_RETRIES + 1):
            if refresh is not None:
                edits = self.call_policy(refresh, self.s.ctx, self.wm.to_json(), wanted, rejection)
            else:  # a policy written before refresh existed: an expansion edit without a cycle
                edits = self.call_policy(self.s.policy.update, self.s.ctx, self.wm.to_json(), [], rejection)
            if edits is None:
                break
            try:
                applied = self.wm.apply_edits(edits, self.state.round)
            except EditRejected as exc:
                rejection = str(exc)
                self.event("edit_rejected", {"reason": rejection, "purpose": "refresh"})
                continue
            self.event("edit", {"changes": applied, "purpose": "refresh"})
            if not applied:
                break  # the proposer has nothing to add: asking again would only cost calls
            changes += applied
            score_need = frontier.score_missing(self.wm)
            wanted = frontier.missing(self.wm) + ([score_need] if score_need else [])
            if not wanted:
                break
            rejection = "after your edit, still missing: " + "; ".join(wanted)
        by = "proposer" if changes else "none"
        if frontier.missing(self.wm):
            fallback = frontier.last_resort(self.wm, "the proposer left the frontier short")
            if fallback is not None:
                changes += self.wm.apply_edits(fallback, self.state.round)
                by = "fallback"
        score_need = frontier.score_missing(self.wm)
        left = frontier.missing(self.wm) + ([score_need] if score_need else [])
        self.event("frontier_refresh", {"needs": asked, "by": by, "changes": changes, "missing": left})
        if changes:
            self.write_state(self.wm.to_json(), "frontier refresh")

    def _parent_score(self, node: dict[str, Any]) -> float:
        """The score an action must beat: its parent's attached solution's, the starting kernel's at the root (0 when
        that did not pass: the cannot-beat-the-parent rule is then off)."""
        assert self.wm is not None
        parent = self.wm.parent(node["node_id"])
        ref = (parent or {}).get("solution_ref") or {}
        if ref.get("solution_id"):
            ev = ref.get("eval") or {}
            return float(ev.get("score") or 0.0) if ev.get("status") in ("passed", "") else 0.0
        return float(self.state.start_score or 0.0)

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

    def _source(self, cid: str | None) -> str | None:
        return self.store.candidate(cid).source(self.store.path) if cid else None

    def _propose(self) -> tuple[ImplementRequest, str | None, tuple[str, dict[str, Any]] | None, str | None]:
        """The policy's candidate for the current cycle's action (one visit of its node): the request, the
        candidate it builds on, (source, params) or None when the policy had nothing (already absorbed as such), and
        the action's title. Shared by the serial loop and the parallel one."""
        assert self.wm is not None and self.state.cycle is not None
        cyc = self.state.cycle
        request, base_cid = self._request()
        out = self.call_policy(self.s.policy.implement, self.s.ctx, request)
        self.state.visits[cyc.node_id] = self.state.visits.get(cyc.node_id, 0) + 1
        if out is None:
            self._absorb(request.mode, None, None, None)
        title = (self.wm.node(cyc.node_id).get("action") or {}).get("title")
        return request, base_cid, out, title

    def _attempt(self) -> None:
        assert self.state.cycle is not None
        node_id = self.state.cycle.node_id
        request, base_cid, out, title = self._propose()
        if out is None:
            return
        source, params = out
        attempt, result = self.submit(source, params, node_id, request.mode, base_cid, title)
        self._absorb(request.mode, attempt, result, params)

    def _request(self) -> tuple[ImplementRequest, str | None]:
        """The proposer's request for the current cycle's next attempt (a first, debug or improve attempt, by what
        the cycle's earlier attempts gave) and the candidate it builds on."""
        assert self.wm is not None and self.state.cycle is not None
        cyc = self.state.cycle
        node = self.wm.node(cyc.node_id)
        mode: Mode = "first"
        if cyc.attempts:
            mode = "improve" if any(a.status == "passed" for a in cyc.attempts) else "debug"
        parent_cid, parent_params = self._parent_solution(node)
        base_cid = cyc.best_candidate if mode == "improve" else (cyc.last_candidate if mode == "debug" else parent_cid)
        latest = cyc.last_candidate if mode == "improve" and cyc.last_candidate != cyc.best_candidate else None
        request = ImplementRequest(
            action=node, mode=mode, parent_source=self._source(base_cid),
            parent_params=(cyc.best_params if mode == "improve" and cyc.best_params else parent_params),
            feedback=Feedback(**cyc.last_feedback) if cyc.last_feedback else None,
            history=list(cyc.attempts), best_source=self._source(self.state.best_candidate),
            best_score=self.state.best_score, world_model=self.wm.to_json(), latest_source=self._source(latest),
            best_feedback=(Feedback(**cyc.best_feedback) if mode == "improve" and cyc.best_feedback else None),
            base_source=self._source(parent_cid) if mode != "first" else None,
            parent_score=cyc.parent_score or None)
        self.s.ctx.round = self.state.round
        return request, base_cid

    def _absorb(self, mode: Mode, attempt: Attempt | None, result: EvalResult | None,
                params: dict[str, Any] | None) -> None:
        """What an attempt of the current cycle gave (attempt None: the proposer produced no code; result None: a
        duplicate) counts towards the cycle's window; the cycle ends, or its state is checkpointed."""
        assert self.state.cycle is not None
        cyc = self.state.cycle
        if attempt is None:
            cyc.consecutive_skips += 1
            cyc.no_improve += 1
            cyc.attempts.append(Attempt("", cyc.node_id, mode, "no_candidate", 0.0, "the policy produced no code"))
        else:
            if result is None:
                cyc.consecutive_skips += 1
                cyc.no_improve += 1
            else:
                cyc.consecutive_skips = 0
                cyc.last_candidate = attempt.candidate_id
                cyc.last_feedback = Feedback.from_result(result).to_json()
                if self.last_profile is not None and self.last_profile[0] == attempt.candidate_id:
                    cyc.last_feedback["counters"] = feedback_line(self.last_profile[1])
                if result.passed and result.score > cyc.best_score * (1 + IMPROVEMENT):
                    attempt.improved = True
                    cyc.best_candidate, cyc.best_score, cyc.best_params = attempt.candidate_id, result.score, params
                    cyc.best_feedback = cyc.last_feedback
                    cyc.no_improve = 0
                else:
                    cyc.no_improve += 1
            cyc.attempts.append(attempt)
        if cyc.best_candidate is not None and cyc.parent_score > 0:
            # As published: once the cycle has a pass, its best must beat the parent's score within W attempts.
            beats = cyc.best_score > cyc.parent_score * (1 + IMPROVEMENT)
            cyc.behind_parent = 0 if beats else cyc.behind_parent + 1
        window = self.s.stagnation_window
        if cyc.no_improve >= window:
            # A window of repeats alone tried nothing: the action has nothing new, it did not stagnate.
            tried = any(a.status not in ("duplicate", "no_candidate") for a in cyc.attempts)
            self._end_cycle("stagnation" if tried else "nothing_new")
        elif cyc.behind_parent >= window:
            self._end_cycle("behind_parent")
        elif cyc.consecutive_skips >= MAX_SKIPS:
            self._end_cycle("nothing_new")
        else:
            self.write_state()

    def _measure(self, cyc: Cycle) -> None:
        """Profile the cycle's best candidate (profile "best" or "all"); its counters move the node's impact ratings
        by the named rules (WorldModel.record_counters) and go into the verdict the world-model edit reads."""
        assert self.wm is not None and cyc.best_candidate is not None
        if self.s.profile_mode not in ("best", "all") or self.s.profile is None:
            return
        rows = [e for e in self.store.evaluations("search") if e["candidate_id"] == cyc.best_candidate]
        result = EvalResult.from_json(rows[-1]["result"]) if rows else None
        report = self.profile(cyc.best_candidate, self._source(cyc.best_candidate) or "", result)
        if report is None:
            return
        digest = ProfileReport.from_json(report).digest()
        if digest:
            fired = self.wm.record_counters(cyc.node_id, digest, self.state.round)
            self.event("counters", {"node_id": cyc.node_id, "candidate": cyc.best_candidate,
                                    "rules": [f["rule"] for f in fired]})
        if cyc.best_feedback is not None:
            cyc.best_feedback["counters"] = feedback_line(report)

    def _why(self, reason: str, cyc: Cycle) -> str:
        """A cycle's end in words (the report shows them)."""
        w = self.s.stagnation_window
        if reason == "stagnation":
            return f"{w} attempts in a row did not improve on the cycle's best (stagnation window {w})"
        if reason == "behind_parent":
            return (f"{w} attempts in a row after its first pass did not beat the parent's score "
                    f"{cyc.parent_score:.4g} (the cycle's best: {cyc.best_score:.4g})")
        if reason == "nothing_new" and cyc.consecutive_skips >= MAX_SKIPS:
            return f"the proposer produced nothing new {MAX_SKIPS} times in a row"
        if reason == "nothing_new":
            return f"each of the cycle's {len(cyc.attempts)} attempts repeated an earlier candidate or gave no code"
        return f"the budget of {self.s.budget} evaluations is spent"

    def _end_cycle(self, reason: str) -> None:
        assert self.wm is not None and self.state.cycle is not None
        cyc = self.state.cycle
        best_before = cyc.best_at_start
        node = self.wm.node(cyc.node_id)
        require: str | None = None
        if cyc.best_candidate:
            parent_cid, _ = self._parent_solution(node)
            self.wm.attach_solution(cyc.node_id, cyc.best_candidate, parent_cid, "passed", cyc.best_score,
                                    round_=self.state.round)
            # A solved node is promised a follow-up: one it already has counts, as in the published validation.
            require = cyc.node_id if self.wm.require_follow_up(cyc.node_id) else None
            self._measure(cyc)
        elif not any(a.status not in ("duplicate", "no_candidate") for a in cyc.attempts):
            # Nothing new was tried (only repeats of earlier candidates): the idea is exhausted, not too hard.
            self.wm.close(cyc.node_id, "exhausted: the proposer had nothing new for this action", self.state.round)
            self.event("exhausted", {"node_id": cyc.node_id})
        else:
            last = cyc.attempts[-1].status if cyc.attempts else "none"
            self.wm.mark_too_hard(cyc.node_id, f"no attempt passed (last: {last})", self.state.round)
            self.event("too_hard", {"node_id": cyc.node_id})
        why = self._why(reason, cyc)
        improved = self.state.best_score > best_before * (1 + IMPROVEMENT)
        # Before the edit, so that a report reads the edits after the cycle's end.
        self.event("cycle_end", {"node_id": cyc.node_id, "title": (node.get("action") or {}).get("title"),
                                 "best_score": cyc.best_score, "attempts": len(cyc.attempts),
                                 "parent_score": cyc.parent_score, "reason": reason, "why": why,
                                 "solved": bool(cyc.best_candidate), "improved_global": improved})
        evaluated = [a for a in cyc.attempts if a.candidate_id and a.status not in ("duplicate", "no_candidate")]
        code_cid = cyc.best_candidate or cyc.last_candidate
        verdict = cyc.best_feedback if cyc.best_candidate else cyc.last_feedback
        expected = (node.get("action") or {}).get("expected_vs_baseline_factor")
        evidence = CycleEvidence(
            node_id=cyc.node_id, end_reason=why, code=self._source(code_cid), code_candidate=code_cid,
            verdict=Feedback(**verdict) if verdict else None,
            expected=float(expected) if isinstance(expected, int | float) else None,
            measured=cyc.best_score if cyc.best_candidate else None, parent_score=cyc.parent_score or None)
        self._edit(evaluated or cyc.attempts, require, evidence)
        self.state.cycles_without_improvement = 0 if improved else self.state.cycles_without_improvement + 1
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

    def _edit(self, cycle: list[Attempt], require_child_of: str | None, evidence: CycleEvidence) -> None:
        """The proposer's edit after a cycle, retried with the reason while it is refused; a solved node without a
        follow-up then gets one all the same (_follow_up)."""
        assert self.wm is not None
        rejection: str | None = None
        last: Any = None
        for _ in range(EDIT_RETRIES + 1):
            edits = self.call_policy(self.s.policy.update, self.s.ctx, self.wm.to_json(), cycle, rejection, evidence)
            if edits is None:
                break
            last = edits
            try:
                changes = self.wm.apply_edits(edits, self.state.round, require_child_of=require_child_of)
            except EditRejected as exc:
                rejection = str(exc)
                self.event("edit_rejected", {"reason": rejection, "purpose": "cycle", "node_id": evidence.node_id})
                continue
            self.event("edit", {"changes": changes, "purpose": "cycle", "node_id": evidence.node_id})
            return
        if require_child_of is not None:
            self._follow_up(require_child_of, last, cycle, rejection)

    def _follow_up(self, node_id: str, last: Any, cycle: list[Attempt], rejection: str | None) -> None:
        """Every solved node gets a follow-up child, whatever the task: the proposer's last edit with a minimal child
        added (its rating updates kept), else the offline policy's edit (with the minimal child where its knowledge
        patterns give none), else the minimal child alone, which is always accepted."""
        from ksearch.policy.offline import OfflinePolicy

        assert self.wm is not None
        child = self.wm.fallback_edit(node_id, why="the proposer's edit gave it none")["ops"]
        tries: list[tuple[str, dict[str, Any]]] = []
        if isinstance(last, dict) and isinstance(last.get("ops"), list):
            tries.append(("the proposer's edit with an automatic follow-up child", {**last, "ops": [*last["ops"],
                                                                                                  *child]}))
        offline = OfflinePolicy().update(self.s.ctx, self.wm.to_json(), cycle, rejection)
        if not any(op.get("op") == "insert_node" and op.get("parent_id") == node_id for op in offline["ops"]):
            tries.append(("the offline policy's edit with an automatic follow-up child",
                          {**offline, "ops": [*offline["ops"], *child]}))
        else:
            tries.append(("the offline policy's edit", offline))
        tries.append(("an automatic follow-up child", {"active_leaf_id": node_id, "ops": child}))
        for label, edit in tries:
            try:
                changes = self.wm.apply_edits(edit, self.state.round, require_child_of=node_id)
            except EditRejected as exc:
                self.event("edit_rejected", {"reason": f"fallback ({label}): {exc}", "purpose": "follow_up",
                                             "node_id": node_id})
                continue
            self.event("edit_fallback", {"node_id": node_id, "source": label, "changes": changes,
                                         "message": f"the follow-up for {node_id}: {label}"
                                         + (f" (the proposer's edit was refused: {rejection})" if rejection else "")})
            return
