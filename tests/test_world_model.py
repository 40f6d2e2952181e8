"""World model: loading K-Search snapshots, clamping, round trips, selection, edits (unit tests)."""

from __future__ import annotations

import copy
import json
import math
import random
from pathlib import Path
from typing import Any

import pytest

from ksearch.config import SelectionWeights
from ksearch.worldmodel import EditRejected, WorldModel, WorldModelError

FIXTURE = Path(__file__).parent / "data" / "kstyle_world_model.json"
W = SelectionWeights()


def action(
    title: str,
    score: float = 0.5,
    difficulty: int = 3,
    rating: float = 5.0,
    confidence: float = 0.5,
    **extra: Any,
) -> dict[str, Any]:
    return {
        "title": title,
        "description": f"do {title}",
        "difficulty_1_to_5": difficulty,
        "score_0_to_1": score,
        "expected_vs_baseline_factor": 1.5,
        "rationale": "because",
        "overall_rating_0_to_10": rating,
        "confidence_0_to_1": confidence,
        **extra,
    }


def kstyle() -> dict[str, Any]:
    return json.loads(FIXTURE.read_text())


# ---- loading, clamping, round trip -------------------------------------------------------------------------


def test_kstyle_fixture_loads_with_published_field_names() -> None:
    m = WorldModel.from_json(kstyle())
    assert m.root_id == "root" and m.active_leaf_id == "n2"
    assert [n["node_id"] for n in m.nodes()] == ["root", "n1", "n2", "n3", "n4"]
    n1 = m.node("n1")
    for key in (
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
    ):
        assert key in n1
    assert n1["solution_ref"]["solution_id"] == "sol_007"
    assert n1["solution_ref"]["eval"] == {"status": "passed", "score": 4.2, "score_name": "speedup_geomean"}
    out = m.to_json()
    assert set(out) >= {"kernel_summary", "decision_tree", "open_questions", "computed_signals"}
    assert out["open_questions"] == kstyle()["open_questions"]
    assert out["computed_signals"] == kstyle()["computed_signals"]


def test_out_of_range_values_are_clamped() -> None:
    m = WorldModel.from_json(kstyle())
    n2, n3 = m.node("n2"), m.node("n3")
    assert n2["action"]["difficulty_1_to_5"] == 5 and n2["action"]["score_0_to_1"] == 1.0
    assert n2["overall_rating_0_to_10"] == 10.0 and n2["confidence_0_to_1"] == 1.0
    assert n2["impacts"]["memory_bandwidth"]["rating_0_to_10"] == 10.0
    assert n2["impacts"]["register_pressure"]["rating_0_to_10"] == 0.0
    assert n3["action"]["difficulty_1_to_5"] == 1 and n3["action"]["score_0_to_1"] == 0.0
    assert n3["confidence_0_to_1"] == 0.0 and n3["action"]["expected_vs_baseline_factor"] > 0


def test_round_trip_is_exact_and_idempotent() -> None:
    m = WorldModel.from_json(kstyle())
    m.attach_solution("n2", "sol_009", "sol_007", "passed", 4.9, round_=4)
    m.apply_edits(
        {"ops": [{"op": "insert_node", "parent_id": "n2", "node": {"action": action("unroll x4")}}]}, 4
    )
    again = WorldModel.from_json(m.to_json())
    assert again == m and again.to_json() == m.to_json()
    assert WorldModel.from_json(json.dumps(m.to_json())).dumps() == m.dumps()


def test_missing_optional_fields_get_defaults_and_extras_survive() -> None:
    raw = {
        "decision_tree": {
            "nodes": [
                {"node_id": "r", "parent_id": None},
                {
                    "node_id": "a",
                    "parent_id": "r",
                    "action": {"title": "t"},
                    "pattern_id": "p1",
                    "status": "too_hard",
                },
            ]
        },
        "custom": [1, 2],
    }
    m = WorldModel.from_json(raw)
    assert m.root_id == "r" and m.node("r")["node_type"] == "root"
    a = m.node("a")
    assert a["action"]["difficulty_1_to_5"] == 3 and a["confidence_0_to_1"] == 0.5
    assert set(a["impacts"]) == {"memory_bandwidth", "register_pressure", "compute_intensity_and_hw_fit"}
    assert a["pattern_id"] == "p1" and a["ksearch"]["status"] == "too_hard"
    assert m.to_json()["custom"] == [1, 2] and m.frontier() == []


def test_nodes_keyed_by_id_are_accepted() -> None:
    data = kstyle()
    data["decision_tree"]["nodes"] = {n["node_id"]: n for n in data["decision_tree"]["nodes"]}
    assert WorldModel.from_json(data) == WorldModel.from_json(kstyle())
    for n in data["decision_tree"]["nodes"].values():
        del n["node_id"]
    assert WorldModel.from_json(data) == WorldModel.from_json(kstyle())


@pytest.mark.parametrize(
    "mutate, match",
    [
        (lambda d: d.pop("decision_tree"), "decision_tree"),
        (lambda d: d["decision_tree"].update(nodes=[]), "empty"),
        (lambda d: d["decision_tree"]["nodes"][2].update(parent_id="ghost"), "does not exist"),
        (lambda d: d["decision_tree"]["nodes"][2].update(node_id="n1"), "twice"),
        (lambda d: d["decision_tree"]["nodes"][1].update(parent_id="n2"), "cycle"),
        (lambda d: d["decision_tree"]["nodes"][1].update(overall_rating_0_to_10="high"), "number"),
        (lambda d: d["decision_tree"]["nodes"][1].update(action=[1]), "action"),
        (lambda d: d["decision_tree"].update(root_id="n4"), "parent"),
    ],
)
def test_invalid_structure_raises_one_line_reason(mutate: Any, match: str) -> None:
    data = kstyle()
    mutate(data)
    with pytest.raises(WorldModelError, match=match) as info:
        WorldModel.from_json(data)
    assert "\n" not in str(info.value)


def test_invalid_json_text() -> None:
    with pytest.raises(WorldModelError, match="not valid JSON"):
        WorldModel.from_json("{nope")


def test_new_builds_root_and_children_keeping_extra_keys() -> None:
    m = WorldModel.new("softmax", [action("a", pattern_id="online_softmax"), action("b", rating=9)])
    assert m.node(m.root_id)["node_type"] == "root" and m.node(m.root_id)["action"] is None
    kids = m.children(m.root_id)
    assert [k["action"]["title"] for k in kids] == ["a", "b"]
    assert kids[0]["pattern_id"] == "online_softmax" and "pattern_id" not in kids[0]["action"]
    assert kids[1]["overall_rating_0_to_10"] == 9.0 and "overall_rating_0_to_10" not in kids[1]["action"]
    assert [n["node_id"] for n in m.frontier()] == [k["node_id"] for k in kids]
    parent = m.parent(kids[0]["node_id"])
    assert parent is not None and parent["node_id"] == m.root_id and m.parent(m.root_id) is None


# ---- frontier and selection --------------------------------------------------------------------------------


def test_children_of_unsolved_nodes_wait() -> None:
    m = WorldModel.from_json(kstyle())
    ids = [n["node_id"] for n in m.frontier()]
    assert "n2" in ids and "n3" not in ids  # n3's parent n2 has no solution yet
    m.attach_solution("n2", "sol_010", "sol_007", "passed", 5.0)
    assert "n3" in [n["node_id"] for n in m.frontier()]


def test_too_hard_nodes_leave_the_frontier() -> None:
    m = WorldModel.from_json(kstyle())
    before = m.node("n4")["action"]["difficulty_1_to_5"]
    m.mark_too_hard("n4", "every attempt failed to compile", round_=5)
    n4 = m.node("n4")
    assert "n4" not in [n["node_id"] for n in m.frontier()]
    assert n4["action"]["difficulty_1_to_5"] == min(5, before + 1) and "TOO_HARD" in n4["notes"]
    assert n4["last_updated_round"] == 5 and m.stats()["too_hard"] == 1


def test_selection_prefers_score_rating_confidence_and_ease() -> None:
    base: dict[str, Any] = dict(score=0.5, difficulty=3, rating=5.0, confidence=0.5)
    for field, better, worse in [
        ("score", 0.9, 0.2),
        ("rating", 9.0, 2.0),
        ("confidence", 0.9, 0.1),
        ("difficulty", 1, 5),
    ]:
        m = WorldModel.new(
            "k", [action("worse", **{**base, field: worse}), action("better", **{**base, field: better})]
        )
        chosen = m.select(W, {}, random.Random(0))
        assert chosen is not None and chosen["action"]["title"] == "better", field


def test_selection_is_deterministic_for_a_seed_and_ties_use_the_rng() -> None:
    m = WorldModel.new("k", [action(f"same{i}") for i in range(6)])
    picks = {seed: m.select(W, {}, random.Random(seed))["node_id"] for seed in range(20)}  # type: ignore[index]
    assert picks == {seed: m.select(W, {}, random.Random(seed))["node_id"] for seed in range(20)}  # type: ignore[index]
    assert len(set(picks.values())) > 1


def test_exploration_bonus_lifts_rarely_tried_branches() -> None:
    m = WorldModel.new("k", [action("popular", score=0.6), action("neglected", score=0.5)])
    m.attach_solution("n1", "s1", None, "passed", 1.2)
    m.apply_edits(
        {"ops": [{"op": "insert_node", "parent_id": "n1", "node": {"action": action("deeper", score=0.6)}}]},
        1,
    )
    no_visits = m.select(W, {}, random.Random(0))
    assert no_visits is not None and no_visits["action"]["title"] != "neglected"
    visits = {"n1": 30}
    assert m.priority("n2", W, visits) > m.priority("n2", W, {"n2": 30})
    chosen = m.select(W, visits, random.Random(0))
    assert chosen is not None and chosen["action"]["title"] == "neglected"
    no_explore = SelectionWeights(exploration=0.0)
    assert m.select(no_explore, visits, random.Random(0))["action"]["title"] != "neglected"  # type: ignore[index]


def test_select_excludes_and_returns_none_on_empty_frontier() -> None:
    m = WorldModel.new("k", [action("a", score=0.9), action("b", score=0.1)])
    assert m.select(W, {}, random.Random(0), exclude={"n1"})["node_id"] == "n2"  # type: ignore[index]
    m.mark_too_hard("n1", "x", 1)
    m.mark_too_hard("n2", "x", 1)
    assert m.select(W, {}, random.Random(0)) is None


# ---- edits -------------------------------------------------------------------------------------------------


def test_each_op_applies_and_describes_itself() -> None:
    m = WorldModel.new("k", [action("a"), action("b"), action("c")])
    m.attach_solution("n1", "s1", None, "passed", 1.5, round_=1)
    changes = m.apply_edits(
        {
            "active_leaf_id": "tile",
            "ops": [
                {
                    "op": "update_node",
                    "node_id": "n1",
                    "patch": {"action": {"score_0_to_1": 0.6}, "notes": "UPDATE_BELIEF"},
                },
                {
                    "op": "insert_node",
                    "parent_id": "n1",
                    "parent_solution_id": "s1",
                    "node": {"node_id": "tile", "action": action("tile 64")},
                },
                {"op": "insert_node", "parent_id": "tile", "node": {"action": action("unroll")}},
                {"op": "delete_node", "node_id": "n3"},
            ],
        },
        round_=2,
    )
    assert len(changes) == 5 and "score_0_to_1 0.5 -> 0.6" in changes[0]
    tile = [n for n in m.children("n1") if n["action"]["title"] == "tile 64"][0]
    assert tile["node_id"] not in ("tile", "n1", "n2", "n3")
    assert tile["ksearch"]["parent_solution_id"] == "s1" and m.active_leaf_id == tile["node_id"]
    assert [c["action"]["title"] for c in m.children(tile["node_id"])] == ["unroll"]
    assert not m.has_node("n3") and m.node("n1")["solution_ref"]["solution_id"] == "s1"
    # ids are never reused, not even those of deleted nodes
    m.apply_edits({"ops": [{"op": "insert_node", "parent_id": "root", "node": {"action": action("z")}}]}, 3)
    assert not any(n["node_id"] == "n3" for n in m.nodes())


def test_split_keeps_the_node_and_adds_alternatives_under_it() -> None:
    m = WorldModel.new("k", [action("tile", difficulty=4), action("other")])
    changes = m.apply_edits(
        {
            "ops": [
                {
                    "op": "split_node",
                    "node_id": "n1",
                    "children": [
                        {"choice": "tile 32", "action": {"title": "tile 32"}},
                        {"choice": "tile 64", "action": {"title": "tile 64", "difficulty_1_to_5": 2}},
                    ],
                }
            ]
        },
        round_=1,
    )
    assert m.has_node("n1") and changes[0].startswith("split n1")
    alts = m.children("n1")
    assert [a["action"]["title"] for a in alts] == ["tile 32", "tile 64"]
    assert [a["action"]["difficulty_1_to_5"] for a in alts] == [4, 2]  # inherited where left out
    assert [a["action"]["description"] for a in alts] == ["", ""]  # words are never inherited
    # They refine n1: selectable once n1 has a solution.
    assert not {a["node_id"] for a in alts} & {n["node_id"] for n in m.frontier()}
    m.attach_solution("n1", "s1", None, "passed", 1.5)
    assert {a["node_id"] for a in alts} <= {n["node_id"] for n in m.frontier()}


@pytest.mark.parametrize(
    "edit, reason",
    [
        ({"ops": [{"op": "delete_node", "node_id": "n1"}]}, "attached solution"),
        ({"ops": [{"op": "delete_node", "node_id": "root"}]}, "root"),
        ({"ops": [{"op": "delete_node", "node_id": "n1x"}]}, "does not exist"),
        (
            {"ops": [{"op": "split_node", "node_id": "n1", "children": [{"action": {"title": "a"}}] * 4}]},
            "at most 3",
        ),
        ({"ops": [{"op": "update_node", "node_id": "n1", "patch": {"solution_ref": None}}]}, "solution_ref"),
        ({"ops": [{"op": "update_node", "node_id": "n2", "patch": {"parent_id": "n1"}}]}, "parent_id"),
        ({"ops": [{"op": "update_node", "node_id": "root", "patch": {"action": {"title": "x"}}}]}, "root"),
        ({"ops": [{"op": "update_node", "node_id": "n2", "patch": {"confidence_0_to_1": "sure"}}]}, "number"),
        (
            {"ops": [{"op": "insert_node", "parent_id": "ghost", "node": {"action": {"title": "x"}}}]},
            "does not exist",
        ),
        (
            {"ops": [{"op": "insert_node", "parent_id": "n1", "node": {"choice": "no action"}}]},
            "action with a title",
        ),
        (
            {
                "ops": [
                    {
                        "op": "insert_node",
                        "parent_id": "n1",
                        "node": {"action": {"title": "x"}, "solution_ref": {"solution_id": "s9"}},
                    }
                ]
            },
            "solution",
        ),
        (
            {
                "ops": [
                    {"op": "insert_node", "parent_id": "n1", "node": {"action": {"title": str(i)}}}
                    for i in range(4)
                ]
            },
            "at most 3",
        ),
        ({"ops": [{"op": "merge_node", "node_id": "n2"}]}, "unknown operation"),
        ({"ops": "insert"}, "list"),
        ({"active_leaf_id": "nowhere", "ops": []}, "does not exist"),
        (
            {
                "ops": [
                    {"op": "delete_node", "node_id": "n2"},
                    {"op": "update_node", "node_id": "n2", "patch": {}},
                ]
            },
            "removed earlier",
        ),
    ],
)
def test_invalid_edits_are_rejected_whole_with_a_readable_reason(edit: dict[str, Any], reason: str) -> None:
    m = WorldModel.new("k", [action("a"), action("b"), action("c")])
    m.attach_solution("n1", "s1", None, "passed", 1.5)
    # a valid op first: it must not survive the rejection of a later one
    edit = (
        {**edit, "ops": [{"op": "update_node", "node_id": "n3", "patch": {"notes": "x"}}, *edit["ops"]]}
        if isinstance(edit["ops"], list)
        else edit
    )
    before = m.dumps()
    with pytest.raises(EditRejected, match=reason):
        m.apply_edits(copy.deepcopy(edit), round_=2)
    assert m.dumps() == before


def test_priority_follows_the_documented_formula() -> None:
    m = WorldModel.new("k", [action("a", score=0.8, difficulty=2, rating=7.0, confidence=0.6), action("b")])
    w = SelectionWeights(score=1.0, rating=0.5, confidence=0.25, difficulty=0.2, exploration=0.4)
    base = 1.0 * 0.8 + 0.5 * 0.7 + 0.25 * 0.6 - 0.2 * (2 - 1) / 4
    assert m.priority("n1", w, {}) == pytest.approx(base)
    visits = {"n1": 3, "n2": 1}
    bonus = min(1.0, math.sqrt(2 * math.log1p(4) / (1 + 3)))
    assert m.priority("n1", w, visits) == pytest.approx(base + 0.4 * bonus)


def test_op_aliases_and_proposed_ids_within_one_edit() -> None:
    m = WorldModel.new("k", [action("a")])
    m.apply_edits(
        {
            "active_leaf_id": "p2",
            "ops": [
                {"type": "insert", "parent_id": "root", "node": {"node_id": "p1", "action": action("x")}},
                {
                    "op": "split_node",
                    "node_id": "p1",
                    "alternatives": [
                        {"node_id": "p2", "action": {"title": "x1"}},
                        {"action": {"title": "x2"}},
                    ],
                },
            ],
        },
        1,
    )
    p1 = next(n for n in m.nodes() if n["action"] and n["action"]["title"] == "x")
    kids = {n["node_id"]: n["action"]["title"] for n in m.children(p1["node_id"])}
    assert sorted(kids.values()) == ["x1", "x2"] and kids[m.active_leaf_id or ""] == "x1"
    assert not set(kids) & {"p1", "p2"} and p1["node_id"] != "p1"


def test_close_takes_a_node_off_the_frontier() -> None:
    m = WorldModel.new("k", [action("a"), action("b")])
    m.close("n1", "abandoned by backtracking", 2)
    assert [n["node_id"] for n in m.frontier()] == ["n2"] and m.stats()["closed"] == 1
    with pytest.raises(EditRejected, match="could never be selected"):
        m.apply_edits({"ops": [{"op": "insert_node", "parent_id": "n1", "node": {"action": action("c")}}]}, 3)


def test_too_hard_nodes_cannot_be_pruned_or_reopened() -> None:
    m = WorldModel.new("k", [action("a"), action("b")])
    m.mark_too_hard("n1", "failed", 1)
    with pytest.raises(EditRejected, match="too_hard"):
        m.apply_edits({"ops": [{"op": "delete_node", "node_id": "n1"}]}, 2)
    with pytest.raises(EditRejected, match="ksearch"):
        m.apply_edits(
            {"ops": [{"op": "update_node", "node_id": "n1", "patch": {"ksearch": {"status": "open"}}}]}, 2
        )


def test_follow_up_child_is_required_under_a_freshly_solved_node() -> None:
    m = WorldModel.new("k", [action("a"), action("b")])
    m.attach_solution("n1", "s1", None, "passed", 2.0)
    assert m.require_follow_up("n1")
    with pytest.raises(EditRejected, match="follow-up"):
        m.apply_edits(
            {"ops": [{"op": "insert_node", "parent_id": "root", "node": {"action": action("c")}}]},
            1,
            require_child_of="n1",
        )
    m.apply_edits(
        {"ops": [{"op": "insert_node", "parent_id": "n1", "node": {"action": action("c")}}]},
        1,
        require_child_of="n1",
    )
    assert not m.require_follow_up("n1")


def test_fallback_edit_is_always_accepted() -> None:
    m = WorldModel.new("k", [action("a", pattern_id="p")])
    assert m.fallback_edit("n1")["ops"] == []  # not solved: nothing to follow up
    m.attach_solution("n1", "s1", None, "passed", 2.0)
    m.apply_edits(m.fallback_edit("n1"), 1, require_child_of="n1")
    child = m.children("n1")[0]
    assert child["action"]["title"] == "Refine: a" and child["pattern_id"] == "p"
    assert m.fallback_edit("n1")["ops"] == [] and not m.require_follow_up("n1")


def test_edits_accept_json_text_and_echoed_solution_refs() -> None:
    m = WorldModel.new("k", [action("a")])
    m.attach_solution("n1", "s1", None, "passed", 2.0)
    echoed = m.node("n1")
    echoed["overall_rating_0_to_10"] = 2
    patch = {k: v for k, v in echoed.items() if k != "last_updated_round"}
    m.apply_edits(json.dumps({"ops": [{"op": "update_node", "node_id": "n1", "patch": patch}]}), 3)
    assert (
        m.node("n1")["overall_rating_0_to_10"] == 2.0 and m.node("n1")["solution_ref"]["solution_id"] == "s1"
    )


# ---- results -----------------------------------------------------------------------------------------------


def test_best_path_and_stats() -> None:
    m = WorldModel.from_json(kstyle())
    assert [n["node_id"] for n in m.best_path()] == ["root", "n1"]
    m.attach_solution("n2", "s9", "sol_007", "passed", 6.0)
    assert [n["node_id"] for n in m.best_path()] == ["root", "n1", "n2"]
    s = m.stats()
    assert s["solved"] == 3 and s["best_node_id"] == "n2" and s["max_depth"] == 3 and s["nodes"] == 5
    assert WorldModel.new("k", [action("a")]).best_path()[0]["node_type"] == "root"
