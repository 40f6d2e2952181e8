"""The K-Search loop with a scripted policy and a scripted judge: stagnation, too-hard marking, backtracking, budget,
duplicates, policy failures, resume of the state."""

from __future__ import annotations

import re
from typing import Any

import pytest

from ksearch.config import RunConfig
from ksearch.errors import PolicyError
from ksearch.harness.result import EvalResult, WorkloadResult
from ksearch.search.start import create_run, execute
from ksearch.worldmodel import WorldModel


def scripted_judge(source: str) -> EvalResult:
    status = re.search(r"STATUS = '(\w+)'", source)
    score = re.search(r"SCORE = ([\d.]+)", source)
    st = status.group(1) if status else "passed"
    sc = float(score.group(1)) if score else 1.0
    r = EvalResult(status=st, task="softmax", backend="mlx-cpu", baseline="native", score=sc if st == "passed" else 0)
    r.workloads = [WorkloadResult(name="w", speedup=sc, latency_s=1e-3, baseline_latency_s=sc * 1e-3)]
    return r


class ScriptedPolicy:
    """Actions A, B, C. `plan[title]` is a list of (status, score) for successive attempts at that action."""

    name = "scripted"

    def __init__(self, plan: dict[str, list[tuple[str, float]]], fail_implement: int = 0) -> None:
        self.plan = plan
        self.counts: dict[str, int] = {}
        self.fail_implement = fail_implement
        self.updates: list[list[Any]] = []
        self.serial = 0

    def analyse(self, ctx: Any) -> str:
        return "scripted analysis"

    def init_world_model(self, ctx: Any, analysis: str) -> dict[str, Any]:
        actions = [{"title": t, "description": t, "difficulty_1_to_5": 2, "score_0_to_1": 0.5,
                    "expected_vs_baseline_factor": 1.5, "rationale": "", "overall_rating_0_to_10": 9 - i,
                    "confidence_0_to_1": 0.5} for i, t in enumerate(self.plan)]
        return WorldModel.new("scripted", actions).to_json()

    def implement(self, ctx: Any, req: Any) -> tuple[str, dict[str, Any]] | None:
        if self.fail_implement > 0:
            self.fail_implement -= 1
            raise PolicyError("scripted LLM failure")
        title = (req.action.get("action") or {}).get("title", "?")
        steps = self.plan.get(title, [("passed", 1.0)])
        i = self.counts.get(title, 0)
        self.counts[title] = i + 1
        status, score = steps[min(i, len(steps) - 1)]
        if i >= len(steps):  # past the script: repeat the last source exactly (a duplicate)
            i = len(steps) - 1
        self.serial += 1
        # The script lives in code, not comments: comments are normalised away by the duplicate check.
        return (f"TITLE = {title!r}\nATTEMPT = {i}\nSTATUS = {status!r}\nSCORE = {score}\n\n"
                "def run(x):\n    return x\n"), {"family": "scripted", "i": i}

    def update(self, ctx: Any, wm: dict[str, Any], cycle: list[Any], rejection: str | None,
               evidence: Any = None) -> dict[str, Any]:
        self.updates.append(cycle)
        if not cycle:
            return {"active_leaf_id": None, "ops": []}
        node_id = cycle[0].node_id
        node = next(n for n in wm["decision_tree"]["nodes"] if n["node_id"] == node_id)
        if (node.get("solution_ref") or {}).get("solution_id"):
            return {"active_leaf_id": node_id, "ops": [{"op": "insert_node", "parent_id": node_id,
                    "parent_solution_id": node["solution_ref"]["solution_id"],
                    "node": {"action": {"title": f"follow {node_id}", "description": "", "difficulty_1_to_5": 3,
                                        "score_0_to_1": 0.1, "expected_vs_baseline_factor": 1.1, "rationale": ""},
                             "overall_rating_0_to_10": 1, "confidence_0_to_1": 0.2}}]}
        return {"active_leaf_id": node_id, "ops": []}

    def state(self) -> dict[str, Any]:
        return {"counts": self.counts}

    def load_state(self, state: dict[str, Any]) -> None:
        self.counts = dict(state.get("counts", {}))


def _run(tmp_path: Any, policy: ScriptedPolicy, budget: int, window: int = 3) -> Any:
    cfg = RunConfig(task="softmax", backend="mlx-cpu", budget=budget, runs_dir=str(tmp_path), stagnation_window=window)
    store, _, _ = create_run(cfg)
    out = execute(store, cfg, evaluate=scripted_judge, policy=policy)
    return store, out


def test_stagnation_ends_cycle_and_attaches_best(tmp_path: Any) -> None:
    plan = {"A": [("passed", 1.5), ("passed", 2.0), ("passed", 1.9), ("passed", 1.8), ("passed", 1.7),
                  ("passed", 1.6)], "B": [("passed", 1.1)] * 10, "C": [("passed", 1.0)] * 10}
    store, out = _run(tmp_path, ScriptedPolicy(plan), budget=8)
    wm = WorldModel.from_json(store.latest_world_model())
    a = next(n for n in wm.nodes() if (n.get("action") or {}).get("title") == "A")
    # 1 start + A: 2.0 at attempt 2, then 3 attempts without improvement end the cycle.
    assert (a.get("solution_ref") or {}).get("eval", {}).get("score") == pytest.approx(2.0)
    assert out.state.best_score == pytest.approx(2.0)
    assert out.state.evaluations_done == 8
    assert len(store.evaluations("search")) == 8
    ends = store.events("cycle_end")
    assert ends and ends[0]["data"]["attempts"] == 5
    # A solved node gets a follow-up child.
    assert wm.children(a["node_id"])


def test_total_failure_marks_too_hard(tmp_path: Any) -> None:
    plan = {"A": [("compile_error", 0)] * 3 + [("runtime_error", 0)] * 5, "B": [("passed", 1.2)] * 10}
    store, _ = _run(tmp_path, ScriptedPolicy(plan), budget=6)
    assert store.events("too_hard")
    wm = WorldModel.from_json(store.latest_world_model())
    assert all((n.get("action") or {}).get("title") != "A" for n in wm.frontier())


def test_duplicates_are_recorded_not_counted(tmp_path: Any) -> None:
    plan = {"A": [("passed", 1.2)], "B": [("passed", 1.3)], "C": [("passed", 1.4)]}
    store, out = _run(tmp_path, ScriptedPolicy(plan), budget=4)
    dups = [c for c in store.candidates() if c.duplicate_of]
    assert dups, "repeated sources must be recorded as duplicates"
    assert out.state.evaluations_done == len(store.evaluations("search")) == 4
    assert out.state.duplicates_skipped == len(dups)


def test_backtracks_when_best_is_flat(tmp_path: Any) -> None:
    plan = {t: [("passed", 1.0 + 0.001 * k) for k in range(30)] for t in ("A", "B", "C", "D")}
    store, _ = _run(tmp_path, ScriptedPolicy(plan), budget=30, window=2)
    assert store.events("backtrack")


def test_policy_errors_are_survived(tmp_path: Any) -> None:
    plan = {"A": [("passed", 1.3), ("passed", 1.4)], "B": [("passed", 1.0 + 0.1 * k) for k in range(9)]}
    store, out = _run(tmp_path, ScriptedPolicy(plan, fail_implement=3), budget=4)
    assert out.state.policy_errors == 3
    assert len(store.events("policy_error")) == 3
    assert out.state.evaluations_done == 4


def test_budget_is_exact_and_state_resumes(tmp_path: Any) -> None:
    plan = {"A": [("passed", 1.0 + 0.1 * k) for k in range(20)]}
    cfg = RunConfig(task="softmax", backend="mlx-cpu", budget=10, runs_dir=str(tmp_path), stagnation_window=3)
    store, _, _ = create_run(cfg)
    first = execute(store, cfg, evaluate=scripted_judge, policy=ScriptedPolicy(plan), stop_after=4)
    assert first.state.evaluations_done == 4
    assert store.get_meta("status") == "stopped"
    policy = ScriptedPolicy(plan)
    second = execute(store, cfg, evaluate=scripted_judge, policy=policy)
    assert second.state.evaluations_done == 10
    assert policy.counts["A"] >= 9  # continued A's counter instead of starting over
    seqs = [e["eval_index"] for e in store.evaluations("search")]
    assert seqs == list(range(1, 11))


def test_a_spent_wall_time_finishes_the_run_and_a_pause_does_not(tmp_path: Any) -> None:
    """A run whose wall time ran out is finished (a resume would stop at once: the limit is the run's), so it gets
    its holdout; one paused by stop_after stays resumable (a run ended by its wall time was once left 'stopped'
    without a holdout)."""
    import time

    from ksearch.errors import RunError
    from ksearch.search.start import start_run

    def slow_judge(source: str) -> EvalResult:
        time.sleep(0.05)
        return scripted_judge(source)

    plan = {"A": [("passed", 1.0 + 0.1 * k) for k in range(50)]}
    cfg = RunConfig(task="softmax", backend="mlx-cpu", budget=100, runs_dir=str(tmp_path), wall_time_s=0.3)
    store, _, _ = create_run(cfg)
    paused = execute(store, cfg, evaluate=slow_judge, policy=ScriptedPolicy(plan), stop_after=2)
    assert paused.state.evaluations_done == 2 and store.get_meta("status") == "stopped"
    out = execute(store, cfg, evaluate=slow_judge, policy=ScriptedPolicy(plan))
    assert 2 < out.state.evaluations_done < 100
    assert store.get_meta("status") == "finished"
    with pytest.raises(RunError, match="wall time"):
        start_run(cfg, resume=str(store.path))
    # A larger budget alone leaves the spent wall time: refused, and nothing is written to the run.
    with pytest.raises(RunError, match="also pass a larger --wall-time with --resume"):
        start_run(cfg, resume=str(store.path), raise_limits={"budget": 500})
    assert store.get_meta("config")["budget"] == 100


@pytest.mark.parametrize("spent", [["--budget"], ["--budget", "--wall-time"]])
def test_a_finished_run_refused_a_resume_names_each_limit_to_raise(tmp_path: Any, spent: list[str]) -> None:
    """A plain resume of a run that finished at its budget names the limits it used up, no other: raising only one
    named is enough (a run that ended at its budget was told `--budget or --wall-time`, and --wall-time alone was
    then refused)."""
    from ksearch.errors import RunError
    from ksearch.search.start import start_run

    cfg = RunConfig(task="softmax", backend="mlx-cpu", budget=1, runs_dir=str(tmp_path), wall_time_s=900)
    store, _, _ = create_run(cfg)
    execute(store, cfg, evaluate=scripted_judge, policy=ScriptedPolicy({"A": [("passed", 1.5)]}))
    assert store.get_meta("status") == "finished" and store.get_meta("evaluations_done") == 1
    if "--wall-time" in spent:  # its wall time ran out with its last evaluation, as its budget did
        used = store.get_state("loop_state")["wall_time_used_s"]
        store.set_meta("config", {**store.get_meta("config"), "wall_time_s": used})
    with pytest.raises(RunError) as plain:
        start_run(cfg, resume=str(store.path))
    assert f"pass a larger {' and '.join(spent)} with --resume" in str(plain.value), plain.value
    assert ("--wall-time" in str(plain.value)) is ("--wall-time" in spent), plain.value
    if spent == ["--budget"]:
        # Only a larger wall time: the budget is still used up, and nothing is written to the run.
        with pytest.raises(RunError, match="reached the budget of 1; also pass a larger --budget with --resume"):
            start_run(cfg, resume=str(store.path), raise_limits={"wall_time_s": 1800})
        assert store.get_meta("config")["wall_time_s"] == 900


def test_a_spent_llm_budget_finishes_the_run(tmp_path: Any) -> None:
    from ksearch.errors import BudgetExhausted

    class Capped(ScriptedPolicy):
        def implement(self, ctx: Any, req: Any) -> tuple[str, dict[str, Any]] | None:
            if self.serial >= 3:
                raise BudgetExhausted("max_usd reached")
            return super().implement(ctx, req)

    store, out = _run(tmp_path, Capped({"A": [("passed", 1.0 + 0.1 * k) for k in range(9)]}), budget=20)
    assert out.state.evaluations_done == 4  # the start and three proposals
    assert store.get_meta("status") == "finished"
    assert store.events("llm_budget")
