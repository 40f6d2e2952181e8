"""Counters change decisions: the named rules move a solved node's impact ratings, and the offline proposer's next
follow-up differs with what the profiler measured."""

from __future__ import annotations

import random
from pathlib import Path

from ksearch.backends.detect import Backend
from ksearch.config import SelectionWeights
from ksearch.harness import ncu
from ksearch.policy.base import Attempt, PolicyContext
from ksearch.policy.offline import OfflinePolicy
from ksearch.tasks import get_task
from ksearch.worldmodel import WorldModel
from ksearch.worldmodel.counters import fire, measured_impacts

FIXTURE = Path(__file__).parent / "data" / "ncu" / "layout_gqa_decode_split_k.csv"

#: A decode kernel that reads at 91% of the H200's DRAM bandwidth: bandwidth saturated.
SATURATED = {"dram_pct": 91.0, "l2_pct": 60.0, "sm_pct": 18.0, "tensor_pct": 0.0, "occupancy_pct": 60.0,
             "occupancy_limiter": "warps", "stalls": [{"reason": "long_scoreboard", "share": 0.55}],
             "kernel_shares": [{"kernel": "k", "share": 1.0}]}
#: The same kernel waiting on memory latency at 45% of peak: prefetching should come first.
LATENCY = {**SATURATED, "dram_pct": 45.0, "sm_pct": 45.0,
           "stalls": [{"reason": "long_scoreboard", "share": 0.72}, {"reason": "wait", "share": 0.1}]}


def _ctx() -> PolicyContext:
    return PolicyContext(task=get_task("gqa_decode"), backend=Backend("mlx-cuda", "cuda"), rng=random.Random(3))


def _solved_model(ctx: PolicyContext) -> tuple[WorldModel, str]:
    policy = OfflinePolicy()
    wm = WorldModel.from_json(policy.init_world_model(ctx, policy.analyse(ctx)))
    node = next(n for n in wm.frontier() if n.get("pattern_id") == "split_k_decode_lse_merge")
    wm.attach_solution(node["node_id"], "c0002", None, "passed", 1.4)
    return wm, node["node_id"]


def _next_action(counters: dict | None) -> tuple[list[str], str]:
    """The follow-ups the offline proposer inserts under the solved node, and the action the search selects next."""
    ctx = _ctx()
    wm, node_id = _solved_model(ctx)
    if counters is not None:
        wm.record_counters(node_id, counters, 1)
    edit = OfflinePolicy().update(ctx, wm.to_json(), [Attempt("c0002", node_id, "first", "passed", 1.4)], None)
    inserted = [op["node"]["pattern_id"] for op in edit["ops"] if op["op"] == "insert_node"]
    wm.apply_edits(edit, 1)
    chosen = wm.select(SelectionWeights(), {node_id: 1}, random.Random(0))
    assert chosen is not None
    return inserted, str(chosen.get("pattern_id"))


def test_the_rules_that_fire_are_named_by_the_counters() -> None:
    assert [f.rule for f in fire(SATURATED)] == ["dram_saturated"]
    assert [f.rule for f in fire(LATENCY)] == ["memory_latency_bound"]
    parsed = ncu.summarize(ncu.parse_csv(FIXTURE.read_text()))
    names = [f.rule for f in fire(parsed)]
    assert "occupancy_limited_by_registers" in names and "dram_pct" in parsed


def test_a_measurement_replaces_the_guessed_rating_and_says_why() -> None:
    impacts = {"memory_bandwidth": {"rating_0_to_10": 8, "risk": "low", "notes": "guess"},
               "register_pressure": {"rating_0_to_10": 3, "risk": "low", "notes": ""}}
    out, fired = measured_impacts(impacts, SATURATED)
    assert out["memory_bandwidth"]["rating_0_to_10"] == 1.0 and out["memory_bandwidth"]["source"] == "counters"
    assert "DRAM at 91% of peak" in out["memory_bandwidth"]["notes"]
    assert out["register_pressure"] == impacts["register_pressure"]  # no rule spoke of it
    assert fired[0].lowers == ("vectorized_loads", "double_buffering")


def test_the_next_action_changes_with_the_counters() -> None:
    inserted, chosen = _next_action(None)
    latency_inserted, latency_chosen = _next_action(LATENCY)
    saturated_inserted, saturated_chosen = _next_action(SATURATED)
    # Without counters no load optimisation is inserted; waiting on memory latency puts one first, and the search
    # selects it next; with the bandwidth saturated no load optimisation is inserted either.
    assert "vectorized_loads" not in inserted
    assert latency_inserted[0] == "vectorized_loads" and latency_chosen == "vectorized_loads"
    assert chosen != latency_chosen
    assert not {"vectorized_loads", "double_buffering"} & set(saturated_inserted)
    assert saturated_chosen not in ("vectorized_loads", "double_buffering")


def test_record_counters_keeps_the_guess_and_a_fallback_child_inherits_no_measurement() -> None:
    ctx = _ctx()
    wm, node_id = _solved_model(ctx)
    guessed = wm.node(node_id)["impacts"]
    wm.record_counters(node_id, SATURATED, 2)
    wm.record_counters(node_id, LATENCY, 3)  # a second measurement starts from the guess again
    node = wm.node(node_id)
    assert node["impacts_guessed"] == guessed
    assert [r["rule"] for r in node["counter_rules"]] == ["memory_latency_bound"]
    assert node["impacts"]["memory_bandwidth"]["rating_0_to_10"] == 7.0
    child = wm.fallback_edit(node_id)["ops"][0]["node"]
    assert "counters" not in child and "counter_rules" not in child and child["impacts"] == guessed


def test_the_edit_prompt_quotes_a_measured_node_in_one_line() -> None:
    from ksearch.policy.llm.prompts import edit_json

    ctx = _ctx()
    wm, node_id = _solved_model(ctx)
    wm.record_counters(node_id, {**LATENCY, "max_registers": 96, "spill_bytes": 0}, 1)
    quoted = next(n for n in __import__("json").loads(edit_json(wm.to_json()))["decision_tree"]["nodes"]
                  if n["node_id"] == node_id)
    assert quoted["counters"].startswith("DRAM 45%, L2 60%, SM 45%") and "long_scoreboard 72%" in quoted["counters"]
    assert quoted["counter_rules"][0].startswith("memory_latency_bound: long-scoreboard stalls 72%")
    assert "impacts_guessed" not in quoted and quoted["impacts"]["memory_bandwidth"]["source"] == "counters"
