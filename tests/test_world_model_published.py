"""The world model against the published K-Search implementation: a `world_model.json` in the shape its code writes
(every node normalised with an `action`, empty for the root and for decision-only nodes; `node_type` "decision";
eval results with the score under `metrics`; json.dumps(indent=2, sort_keys=True)) loads, keeps what it says, and
round-trips; `split_node` adds children under the node as the published edit does."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from ksearch.config import SelectionWeights
from ksearch.worldmodel import EditRejected, WorldModel

FIXTURE = Path(__file__).parent / "data" / "ksearch_published_world_model.json"


def published() -> dict[str, Any]:
    return json.loads(FIXTURE.read_text())


def published_frontier(data: dict[str, Any]) -> list[str]:
    """The published selection's candidates, written out from its rule: a titled action, no solution, and a parent
    that is the root or has a solution."""
    tree = data["decision_tree"]
    nodes = {n["node_id"]: n for n in tree["nodes"]}

    def sid(n: dict[str, Any]) -> Any:
        return (n.get("solution_ref") or {}).get("solution_id")

    out = []
    for n in tree["nodes"]:
        title = str((n.get("action") or {}).get("title") or "").strip()
        if not title or sid(n) or n["parent_id"] is None:
            continue
        if n["parent_id"] == tree["root_id"] or sid(nodes[n["parent_id"]]):
            out.append(n["node_id"])
    return out


def test_a_published_world_model_loads_with_its_meaning() -> None:
    data = published()
    m = WorldModel.from_json(FIXTURE.read_text())
    assert m.root_id == "root" and m.active_leaf_id == "node_gqa_paged_decode_r4_1"
    assert len(m.nodes()) == len(data["decision_tree"]["nodes"])
    # An empty action (the root's, a decision-only family node's) is no action: it is never selected.
    assert m.node("root")["action"] is None and m.node("fam_tc")["action"] is None
    assert [n["node_id"] for n in m.frontier()] == published_frontier(data)
    # The score of a published eval sits under metrics: it is the node's score here too.
    best = m.best_node()
    assert best is not None and best["node_id"] == "node_gqa_paged_decode_r4_1"
    assert best["solution_ref"]["eval"]["score"] == pytest.approx(1.58)
    assert m.stats()["solved"] == 2 and m.stats()["max_depth"] == 3
    node = m.select(SelectionWeights(), {}, __import__("random").Random(0))
    assert node is not None and node["node_id"] in published_frontier(data)


def test_a_published_world_model_round_trips() -> None:
    data = published()
    m = WorldModel.from_json(data)
    again = WorldModel.from_json(json.loads(json.dumps(m.to_json(), indent=2, sort_keys=True)))
    assert again.dumps() == m.dumps()
    out = m.to_json()
    for key in ("kernel_summary", "open_questions", "computed_signals"):
        assert out[key] == data[key]
    assert out["decision_tree"]["root_id"] == data["decision_tree"]["root_id"]
    assert out["decision_tree"]["active_leaf_id"] == data["decision_tree"]["active_leaf_id"]
    ours = {n["node_id"]: n for n in out["decision_tree"]["nodes"]}
    assert list(ours) == [n["node_id"] for n in data["decision_tree"]["nodes"]]  # order kept too
    for theirs in data["decision_tree"]["nodes"]:
        n = ours[theirs["node_id"]]
        for key in ("parent_id", "node_type", "notes", "overall_rating_0_to_10", "confidence_0_to_1", "impacts",
                    "last_updated_round"):
            assert n[key] == theirs[key], (theirs["node_id"], key)
        # Their null decision / choice (the root's) reads as empty text.
        assert (n["decision"], n["choice"]) == (theirs["decision"] or "", theirs["choice"] or "")
        ref, their_ref = n["solution_ref"], theirs["solution_ref"]
        assert ref["solution_id"] == their_ref["solution_id"]
        assert ref["parent_solution_id"] == their_ref["parent_solution_id"]
        for key, value in their_ref["eval"].items():  # every field of the eval, metrics included
            assert ref["eval"][key] == value
        if theirs["action"]["title"]:
            for key, value in theirs["action"].items():
                if not (key == "expected_vs_baseline_factor" and value is None):
                    assert n["action"][key] == value, (theirs["node_id"], key)


def test_search_continues_on_a_published_world_model() -> None:
    m = WorldModel.from_json(published())
    m.attach_solution("node_best_cont_r9_1", "c0009", "gqa_paged_decode_ksearch_r6_c3d4", "passed", 1.7, round_=10)
    m.apply_edits(m.fallback_edit("node_best_cont_r9_1"), 10, require_child_of="node_best_cont_r9_1")
    assert [c["parent_id"] for c in m.children("node_best_cont_r9_1")] == ["node_best_cont_r9_1"]
    assert m.best_node()["node_id"] == "node_best_cont_r9_1"  # type: ignore[index]


def test_split_node_adds_children_under_the_node_as_published() -> None:
    m = WorldModel.from_json(published())
    changes = m.apply_edits(
        {"ops": [{"op": "split_node", "node_id": "fam_split", "parent_patch": {"notes": "split by chunk policy"},
                  "children": [{"choice": "fixed 4 chunks", "action": {"title": "Split KV into 4 chunks"}},
                               {"choice": "chunks by length", "action": {"title": "Chunk count from the KV length",
                                                                         "difficulty_1_to_5": 5}}]}]},
        round_=11,
    )
    # The node stays, with its patch; its alternatives hang under it (they wait until it is implemented).
    assert m.has_node("fam_split") and m.node("fam_split")["notes"] == "split by chunk policy"
    kids = m.children("fam_split")
    assert [k["action"]["title"] for k in kids] == ["Split KV into 4 chunks", "Chunk count from the KV length"]
    assert [k["action"]["difficulty_1_to_5"] for k in kids] == [4, 5]  # left out: the node's
    assert "fam_split" in [n["node_id"] for n in m.frontier()]
    assert not {k["node_id"] for k in kids} & {n["node_id"] for n in m.frontier()}
    assert changes[-1].startswith("split fam_split") and "under it" in changes[-1]
    # Under a solved node the alternatives are follow-ups, selectable at once, and they satisfy the follow-up rule.
    m.attach_solution("fam_split", "c0010", None, "passed", 1.2, round_=12)
    m.apply_edits({"ops": [{"op": "split_node", "node_id": "fam_split",
                            "children": [{"action": {"title": "Split in 2"}}, {"action": {"title": "Split in 8"}}]}]},
                  12, require_child_of="fam_split")
    assert {"Split in 2", "Split in 8"} <= {n["action"]["title"] for n in m.frontier()}


@pytest.mark.parametrize("target, children, reason", [
    ("nowhere", [{"action": {"title": "a"}}], "does not exist"),
    ("fam_split", [], "children"),
    ("fam_split", "x", "children"),
    ("fam_split", [{"choice": "no action"}], "action with a title"),
])
def test_bad_splits_are_refused_whole(target: str, children: Any, reason: str) -> None:
    m = WorldModel.from_json(published())
    before = m.dumps()
    with pytest.raises(EditRejected, match=reason):
        m.apply_edits({"ops": [{"op": "split_node", "node_id": target, "children": children}]}, 3)
    assert m.dumps() == before


def test_a_split_under_a_node_judged_too_hard_is_refused() -> None:
    m = WorldModel.from_json(published())
    m.mark_too_hard("fam_split", "nothing passed", 5)
    with pytest.raises(EditRejected, match="could never be selected"):
        m.apply_edits({"ops": [{"op": "split_node", "node_id": "fam_split",
                                "children": [{"action": {"title": "a"}}, {"action": {"title": "b"}}]}]}, 6)


def _tree(*actions: tuple[str, float, int, float]) -> WorldModel:
    return WorldModel.new("k", [{"title": t, "score_0_to_1": s, "difficulty_1_to_5": d, "overall_rating_0_to_10": r}
                                for t, s, d, r in actions])


def test_the_published_selection_rule_orders_by_score_then_difficulty_then_rating() -> None:
    import random

    published_rule = SelectionWeights(rule="published")
    m = _tree(("hard but promising", 0.95, 5, 9.0), ("b", 0.7, 3, 5.0), ("c", 0.7, 2, 4.0), ("d", 0.7, 2, 6.0),
              ("e", 0.2, 1, 10.0))
    order = [n["action"]["title"] for n in m.ranked(published_rule, {})]
    # Difficulty 5 is above the cut-off (4) while easier actions exist; then score, difficulty, rating.
    assert order == ["d", "c", "b", "e", "hard but promising"]
    assert m.select(published_rule, {"n4": 50}, random.Random(0))["action"]["title"] == "d"  # type: ignore[index]
    # Visits do not move it (no exploration term); the weighted rule here picks the hard action first.
    assert m.select(SelectionWeights(), {}, random.Random(0))["action"]["title"] == "hard but promising"  # type: ignore[index]
    only_hard = _tree(("x", 0.3, 5, 1.0), ("y", 0.6, 5, 1.0))
    assert only_hard.select(published_rule, {}, random.Random(0))["action"]["title"] == "y"  # type: ignore[index]


def test_an_unknown_selection_rule_is_a_config_error(tmp_path: Path) -> None:
    from ksearch.config import load_config
    from ksearch.errors import ConfigError

    cfg = tmp_path / "run.toml"
    cfg.write_text('[weights]\nrule = "greedy"\n')
    with pytest.raises(ConfigError, match="weighted, published"):
        load_config(cfg)
    cfg.write_text('[weights]\nrule = "published"\nexploration = 0.2\n')
    loaded = load_config(cfg)
    assert loaded.weights.rule == "published" and loaded.weights.exploration == 0.2
