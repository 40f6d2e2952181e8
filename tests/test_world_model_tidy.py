"""A proposer's first tree with broken links (repeated ids, lost or unknown parents) is mended, not refused: the
links only, each change listed, the content the loader's to check."""

from __future__ import annotations

import copy
from typing import Any

from ksearch.worldmodel import WorldModel
from ksearch.worldmodel.tidy import tidy_tree


def node(nid: Any, parent: Any, title: str = "t", node_type: str = "action") -> dict[str, Any]:
    return {"node_id": nid, "parent_id": parent, "node_type": node_type, "decision": "d", "choice": "c",
            "action": {"title": title, "description": "x", "difficulty_1_to_5": 2, "score_0_to_1": 0.5,
                       "expected_vs_baseline_factor": 1.2, "rationale": "r"}}


def model(nodes: list[Any], root_id: Any = "root") -> dict[str, Any]:
    return {"kernel_summary": "s", "decision_tree": {"root_id": root_id, "active_leaf_id": None, "nodes": nodes}}


def test_a_valid_tree_is_left_as_it_is():
    wm = model([node("root", None, node_type="root"), node("n1", "root"), node("n2", "n1")])
    same, changes = tidy_tree(copy.deepcopy(wm))
    assert same == wm and changes == []


def test_what_a_small_model_writes_becomes_a_tree_with_its_content():
    # Seen from SmolLM2-135M: the first node claims no parent, the root comes second, ids repeat.
    wm = model([node("n1", None, "fuse"), node("root", None, "again", "action"), node("n1", "root", "tile"),
                node("n3", "n9", "vector"), node("n4", "n4", "self"), "not a node"])
    tidy, changes = tidy_tree(wm)
    loaded = WorldModel.from_json(tidy)
    nodes = tidy["decision_tree"]["nodes"]
    assert [n["node_id"] for n in nodes][0] == "root" and nodes[0]["parent_id"] is None
    assert sorted(n["action"]["title"] for n in nodes) == ["again", "fuse", "self", "tile", "vector"]
    assert len({n["node_id"] for n in nodes}) == len(nodes) == 5
    assert all(n["parent_id"] == "root" for n in nodes[1:])
    assert loaded.root_id == "root"
    assert any("repeated" in c for c in changes) and any("'n9'" in c for c in changes)
    assert any("not objects dropped" in c for c in changes)
    assert wm["decision_tree"]["nodes"][0]["parent_id"] is None  # the input is not changed


def test_a_tree_without_a_root_gets_one_and_a_cycle_cannot_form():
    tidy, changes = tidy_tree(model([node("a", "b"), node("b", "a")], root_id=None))
    WorldModel.from_json(tidy)
    assert changes == ["no root: one added", "node 'a': parent 'b' is no earlier node, now the root"]
    assert [(n["node_id"], n["parent_id"]) for n in tidy["decision_tree"]["nodes"]] == [
        ("root", None), ("a", "root"), ("b", "a")]


def test_what_is_not_a_tree_is_left_to_the_loader():
    assert tidy_tree("text") == ("text", [])
    assert tidy_tree({"decision_tree": {"nodes": {}}}) == ({"decision_tree": {"nodes": {}}}, [])
