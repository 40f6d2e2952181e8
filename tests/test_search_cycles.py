"""The refine cycle as published: its stop rules (stagnation, cannot beat the parent), the frontier kept supplied
before every cycle (the proposer's edit, then a deterministic child), and a follow-up child for every solved node on
every task. A scripted policy and a scripted judge; no hardware."""

from __future__ import annotations

from typing import Any

from test_search_loop import ScriptedPolicy, scripted_judge

from ksearch.config import RunConfig
from ksearch.policy.base import PolicyContext
from ksearch.policy.offline import OfflinePolicy
from ksearch.search.start import create_run, execute
from ksearch.worldmodel import WorldModel


class Scripted(ScriptedPolicy):
    """ScriptedPolicy whose first actions are A, B, C only; the plan also scripts actions inserted later."""

    first: tuple[str, ...] = ("A", "B", "C")

    def __init__(self, plan: dict[str, list[tuple[str, float]]], first: tuple[str, ...] | None = None) -> None:
        super().__init__(plan)
        if first is not None:
            self.first = first

    def init_world_model(self, ctx: Any, analysis: str) -> dict[str, Any]:
        plan, self.plan = self.plan, {t: self.plan.get(t, [("passed", 1.0)]) for t in self.first}
        try:
            return super().init_world_model(ctx, analysis)
        finally:
            self.plan = plan


def _run(tmp_path: Any, policy: Any, budget: int, window: int = 3, task: str = "softmax") -> Any:
    cfg = RunConfig(task=task, backend="mlx-cpu", budget=budget, runs_dir=str(tmp_path), stagnation_window=window)
    store, _, _ = create_run(cfg)
    out = execute(store, cfg, evaluate=scripted_judge, policy=policy)
    return store, out


def _by_title(wm: WorldModel, title: str) -> dict[str, Any]:
    return next(n for n in wm.nodes() if (n.get("action") or {}).get("title") == title)


def test_a_cycle_ends_after_w_attempts_that_do_not_beat_the_parent(tmp_path: Any) -> None:
    """The follow-up under A (solved at 2.0) keeps improving on itself, from 1.0 by 0.1 a step, but never reaches its
    parent's 2.0: after W = 3 such attempts its cycle ends. Without the rule it runs on until the budget is spent."""
    plan = {"A": [("passed", 2.0)] + [("passed", 1.9)] * 5,
            "follow n1": [("passed", 1.0 + 0.1 * k) for k in range(20)]}
    store, out = _run(tmp_path, Scripted(plan, first=("A",)), budget=16)
    ends = [e["data"] for e in store.events("cycle_end")]
    assert [e["title"] for e in ends[:2]] == ["A", "follow n1"], ends
    assert ends[0]["reason"] == "stagnation" and ends[0]["attempts"] == 4
    follow = ends[1]
    assert follow["attempts"] == 3 and follow["reason"] == "behind_parent", ends
    assert "2" in follow["why"] and "parent" in follow["why"] and follow["parent_score"] == 2.0
    # The budget left went to other actions.
    assert out.state.evaluations_done == 16 and len(ends) >= 3


def test_the_cannot_beat_the_parent_rule_waits_for_a_pass(tmp_path: Any) -> None:
    """Failures before the first pass count towards stagnation only; the parent rule starts with a passing attempt."""
    plan = {"A": [("compile_error", 0.0), ("passed", 0.5), ("passed", 0.6), ("passed", 0.7), ("passed", 0.8)],
            "B": [("passed", 1.5)] * 5, "C": [("passed", 1.0)] * 5}
    store, _ = _run(tmp_path, Scripted(plan), budget=12, window=3)
    first = store.events("cycle_end")[0]["data"]
    assert first["node_id"] == "n1" and first["attempts"] == 4 and first["reason"] == "behind_parent"


class RefreshingPolicy(Scripted):
    """Two first actions; asked to refresh the frontier, it inserts one rated action under the root."""

    first = ("A", "B")

    def __init__(self, plan: dict[str, list[tuple[str, float]]]) -> None:
        super().__init__(plan)
        self.refreshes: list[list[str]] = []

    def refresh(self, ctx: Any, wm: dict[str, Any], needs: list[str], rejection: str | None) -> dict[str, Any]:
        self.refreshes.append(list(needs))
        n = len(self.refreshes)
        return {"active_leaf_id": None, "ops": [{"op": "insert_node", "parent_id": "root", "node": {
            "action": {"title": f"R{n}", "description": "refresh", "difficulty_1_to_5": 2, "score_0_to_1": 0.7,
                       "expected_vs_baseline_factor": 1.2, "rationale": ""},
            "overall_rating_0_to_10": 2, "confidence_0_to_1": 0.5}}]}


def test_the_frontier_is_refreshed_by_the_proposer_before_a_cycle(tmp_path: Any) -> None:
    plan = {"A": [("passed", 1.5)] * 3, "B": [("passed", 1.2)] * 3}
    policy = RefreshingPolicy(plan)
    store, _ = _run(tmp_path, policy, budget=4)
    assert policy.refreshes, "two actions ready to try: the proposer must be asked for more"
    assert any("at least 3" in need for need in policy.refreshes[0])
    assert any("above 0.5" in need for need in policy.refreshes[0])
    events = [e["kind"] for e in store.events() if e["kind"] in ("frontier_refresh", "select")]
    assert events[:2] == ["frontier_refresh", "select"]
    refresh = store.events("frontier_refresh")[0]["data"]
    assert refresh["by"] == "proposer" and refresh["missing"] == []
    wm = WorldModel.from_json(store.latest_world_model())
    assert _by_title(wm, "R1")["parent_id"] == "root"


def test_a_deterministic_child_supplies_the_best_node_as_the_last_resort(tmp_path: Any) -> None:
    """A (2.0) is the best; its only follow-up fails entirely and is set aside as too hard. The proposer adds
    nothing: before the next cycle the best node gets a minimal child all the same, and the search goes on from it."""
    plan = {"A": [("passed", 2.0)] * 4, "follow n1": [("compile_error", 0.0)] * 5,
            "Refine: A": [("passed", 2.5)] * 4, "B": [("passed", 1.0)] * 5, "C": [("passed", 1.0)] * 5}
    store, out = _run(tmp_path, Scripted(plan, first=("A",)), budget=14)
    wm = WorldModel.from_json(store.latest_world_model())
    auto = _by_title(wm, "Refine: A")
    assert auto["parent_id"] == "n1" and auto.get("auto_follow_up") is True
    refresh = [e["data"] for e in store.events("frontier_refresh") if e["data"]["by"] == "fallback"]
    assert refresh and "n1" in refresh[0]["changes"][0]
    assert out.state.best_score == 2.5  # the minimal child was tried, and it paid


def test_the_offline_proposer_refreshes_from_its_patterns(cpu_backend: Any) -> None:
    import random

    from ksearch.tasks import get_task

    ctx = PolicyContext(task=get_task("selective_scan"), backend=cpu_backend, rng=random.Random(1))
    pol = OfflinePolicy()
    wm = WorldModel.from_json(pol.init_world_model(ctx, pol.analyse(ctx)))
    first = wm.frontier()[0]
    for n in wm.frontier()[1:]:
        wm.close(n["node_id"], "tried", 1)
    wm.attach_solution(first["node_id"], "c0001", None, "passed", 2.0)
    edit = pol.refresh(ctx, wm.to_json(), ["the best node has no open child"], None)
    changes = wm.apply_edits(edit, 2)
    kids = wm.children(first["node_id"])
    assert kids and all(k["pattern_id"] != first["pattern_id"] for k in kids), changes
    assert len(wm.frontier()) == len(kids)


class RatingOnlyPolicy(Scripted):
    """An edit that updates the solved node's rating but inserts nothing (what a weak model often sends)."""

    def update(self, ctx: Any, wm: dict[str, Any], cycle: list[Any], rejection: str | None,
               evidence: Any = None) -> dict[str, Any]:
        self.updates.append(cycle)
        if not cycle:
            return {"ops": []}
        return {"active_leaf_id": cycle[0].node_id, "ops": [{"op": "update_node", "node_id": cycle[0].node_id,
                                                             "patch": {"overall_rating_0_to_10": 9.5,
                                                                       "notes": "UPDATE_BELIEF: it works"}}]}


def test_every_solved_node_gets_a_follow_up_on_a_task_without_templates(tmp_path: Any) -> None:
    """selective_state_update has no template family on any backend, so the offline proposer's knowledge patterns
    cannot supply a follow-up: the solved node still gets one, and the proposer's rating update is kept."""
    plan = {"A": [("passed", 1.6)] * 4, "B": [("passed", 1.2)] * 4, "C": [("passed", 1.1)] * 4}
    store, _ = _run(tmp_path, RatingOnlyPolicy(plan), budget=6, task="selective_state_update")
    wm = WorldModel.from_json(store.latest_world_model())
    solved = [n for n in wm.nodes() if (n.get("solution_ref") or {}).get("solution_id")]
    assert solved
    for n in solved:
        assert not wm.require_follow_up(n["node_id"]), f"{n['node_id']} has no open follow-up"
    assert wm.node("n1")["overall_rating_0_to_10"] == 9.5 and "it works" in wm.node("n1")["notes"]
    fallback = store.events("edit_fallback")[0]["data"]
    assert fallback["node_id"] == "n1" and "follow-up" in fallback["message"]


class Echo(Scripted):
    """Action B's code is always action A's first candidate: every attempt of B's cycle repeats an earlier one."""

    def implement(self, ctx: Any, req: Any) -> tuple[str, dict[str, Any]] | None:
        if (req.action.get("action") or {}).get("title") == "B":
            return ("TITLE = 'A'\nATTEMPT = 0\nSTATUS = 'passed'\nSCORE = 2.0\n\ndef run(x):\n    return x\n",
                    {"family": "scripted", "i": 0})
        return super().implement(ctx, req)


def test_a_cycle_of_repeats_ends_with_nothing_new_not_stagnation(tmp_path: Any) -> None:
    plan = {"A": [("passed", 2.0)] * 2, "B": [("passed", 1.0)], "C": [("passed", 1.0)] * 4}
    store, _ = _run(tmp_path, Echo(plan), budget=8)
    ends = {e["data"]["title"]: e["data"] for e in store.events("cycle_end")}
    assert ends["B"]["reason"] == "nothing_new", ends["B"]
    assert "repeated an earlier candidate" in ends["B"]["why"]
    assert ends["A"]["reason"] == "stagnation"
