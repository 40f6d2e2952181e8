"""World model invariants under random sequences of edits (valid and invalid), solutions and too-hard
marks."""

from __future__ import annotations

import random
from typing import Any

from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from ksearch.config import SelectionWeights
from ksearch.worldmodel import EditRejected, WorldModel

BOGUS = ["ghost", "root2", "", 7]
SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])

numbers = st.one_of(st.floats(-5, 15, allow_nan=False), st.integers(-3, 12), st.sampled_from(["0.3", None]))
bad_numbers = st.sampled_from(["x", True, [1]])


def rarely(draw: Any, good: Any, bad: Any) -> Any:
    """Mostly a valid value, sometimes (1 in 16) an invalid one, so sequences contain both kinds of edit."""
    return draw(bad) if draw(st.integers(0, 15)) == 0 else draw(good)


def node_body(draw: Any, ids: list[str]) -> dict[str, Any]:
    body: dict[str, Any] = {}
    if draw(st.booleans()):
        body["node_id"] = draw(st.sampled_from(ids + ["new_a", "new_b"]))
    if draw(st.integers(0, 9)) > 0:  # mostly with an action
        body["action"] = {
            "title": rarely(draw, st.sampled_from(["t1", "t2"]), st.just("")),
            "score_0_to_1": rarely(draw, numbers, bad_numbers),
            "difficulty_1_to_5": draw(numbers),
        }
    if draw(st.integers(0, 15)) == 0:
        body["solution_ref"] = {"solution_id": "forged"}
    if draw(st.booleans()):
        body["overall_rating_0_to_10"] = draw(numbers)
    return body


def random_op(draw: Any, ids: list[str]) -> dict[str, Any]:
    non_root = [i for i in ids if i != "root"] or ids
    ref = st.one_of(
        st.sampled_from(non_root + ["new_a"]), st.sampled_from(ids), st.sampled_from(BOGUS + ["root"])
    )
    ref = st.one_of(ref, st.sampled_from(non_root), st.sampled_from(non_root))
    kind = rarely(
        draw,
        st.sampled_from(["insert_node", "insert_node", "update_node", "split_node", "delete_node"]),
        st.just("bogus_op"),
    )
    if kind == "insert_node":
        return {"op": kind, "parent_id": draw(ref), "node": node_body(draw, ids)}
    if kind == "update_node":
        patch_key = rarely(
            draw,
            st.sampled_from(["overall_rating_0_to_10", "confidence_0_to_1", "notes", "action", "pattern_id"]),
            st.sampled_from(["solution_ref", "parent_id", "node_type", "ksearch"]),
        )
        value: Any = {
            "action": {"score_0_to_1": draw(numbers)},
            "notes": "UPDATE_BELIEF",
            "solution_ref": None,
            "parent_id": draw(ref),
            "node_type": draw(st.sampled_from(["root", "action"])),
            "ksearch": {"status": "open"},
            "pattern_id": "p",
        }.get(patch_key, rarely(draw, numbers, bad_numbers))
        return {"op": kind, "node_id": draw(ref), "patch": {patch_key: value}}
    if kind == "split_node":
        return {
            "op": kind,
            "node_id": draw(ref),
            "children": [node_body(draw, ids) for _ in range(rarely(draw, st.integers(2, 3), st.just(1)))],
        }
    return {"op": kind, "node_id": draw(ref)}


def reference_frontier(m: WorldModel) -> list[str]:
    """The frontier rule written out independently of the implementation."""
    nodes = {n["node_id"]: n for n in m.nodes()}

    def solved(n: dict[str, Any]) -> bool:
        return bool(n["solution_ref"] and n["solution_ref"].get("solution_id"))

    out = []
    for n in m.nodes():
        if n["action"] is None or solved(n) or n["ksearch"]["status"] in ("too_hard", "closed"):
            continue
        if n["parent_id"] is None:
            continue
        parent = nodes[n["parent_id"]]
        if parent["node_id"] == m.root_id or solved(parent):
            out.append(n["node_id"])
    return out


def check_invariants(m: WorldModel, root_id: str, solutions: dict[str, Any]) -> None:
    nodes = m.nodes()
    ids = [n["node_id"] for n in nodes]
    assert len(ids) == len(set(ids)), "ids unique"
    assert m.root_id == root_id
    roots = [n for n in nodes if n["parent_id"] is None]
    assert [r["node_id"] for r in roots] == [root_id], "single root, unchanged"
    index = {n["node_id"]: n for n in nodes}
    for n in nodes:  # every parent exists, and walking up ends at the root (no cycles)
        seen, cur = set(), n
        while cur["parent_id"] is not None:
            assert cur["parent_id"] in index, "parent exists"
            assert cur["node_id"] not in seen, "no cycle"
            seen.add(cur["node_id"])
            cur = index[cur["parent_id"]]
        assert cur["node_id"] == root_id
    for nid, ref in solutions.items():
        assert nid in index and index[nid]["solution_ref"] == ref, "solutions never lost or changed"
    assert [n["node_id"] for n in m.frontier()] == reference_frontier(m)
    for n in m.frontier():
        assert 0.0 <= n["action"]["score_0_to_1"] <= 1.0 and 1 <= n["action"]["difficulty_1_to_5"] <= 5
        assert 0.0 <= n["overall_rating_0_to_10"] <= 10.0
    active = m.active_leaf_id
    assert active is None or active in index
    assert WorldModel.from_json(m.to_json()) == m, "round trip"


@SETTINGS
@given(st.data())
def test_random_edit_sequences_keep_the_tree_invariants(data: st.DataObject) -> None:
    draw = data.draw
    m = WorldModel.new(
        "k", [{"title": f"a{i}", "score_0_to_1": 0.1 * i} for i in range(draw(st.integers(1, 4)))]
    )
    root_id = m.root_id
    solutions: dict[str, Any] = {}
    rng = random.Random(draw(st.integers(0, 10)))
    for step in range(draw(st.integers(1, 10))):
        ids = [n["node_id"] for n in m.nodes()]
        kind = draw(st.sampled_from(["edit", "edit", "edit", "solve", "too_hard"]))
        frontier = [n["node_id"] for n in m.frontier()]
        if kind == "solve" and frontier:
            nid = draw(st.sampled_from(frontier))
            m.attach_solution(nid, f"s{step}", None, "passed", draw(st.floats(0, 5)), round_=step)
            solutions[nid] = m.node(nid)["solution_ref"]
        elif kind == "too_hard" and frontier:
            m.mark_too_hard(draw(st.sampled_from(frontier)), "failed", step)
        else:
            ops = [random_op(draw, ids) for _ in range(draw(st.integers(1, 3)))]
            edit: dict[str, Any] = {"ops": ops}
            if draw(st.booleans()):
                edit["active_leaf_id"] = rarely(
                    draw, st.sampled_from(ids + ["new_a"]), st.sampled_from(BOGUS)
                )
            require = draw(st.sampled_from([None, None, None, *solutions])) if solutions else None
            before = m.dumps()
            try:
                changes = m.apply_edits(edit, round_=step, require_child_of=require)
            except EditRejected as exc:
                event(f"rejected: {str(exc).split(':')[-1][:40]}")
                assert str(exc) and "\n" not in str(exc)
                assert m.dumps() == before, "a rejected edit leaves the model byte-identical"
            else:
                event(f"accepted edit with {len(ops)} ops")
                assert isinstance(changes, list)
                if require is not None:
                    assert not m.require_follow_up(require)
        check_invariants(m, root_id, solutions)
        chosen = m.select(SelectionWeights(), {i: draw(st.integers(0, 3)) for i in ids[:3]}, rng)
        assert chosen is None or chosen["node_id"] in {n["node_id"] for n in m.frontier()}


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(st.floats(0, 1), st.integers(1, 5), st.floats(0, 10), st.floats(0, 1)),
        min_size=1,
        max_size=6,
    ),
    st.integers(0, 1000),
)
def test_selection_is_the_argmax_and_repeatable(
    specs: list[tuple[float, int, float, float]], seed: int
) -> None:
    m = WorldModel.new(
        "k",
        [
            {
                "title": f"a{i}",
                "score_0_to_1": s,
                "difficulty_1_to_5": d,
                "overall_rating_0_to_10": r,
                "confidence_0_to_1": c,
            }
            for i, (s, d, r, c) in enumerate(specs)
        ],
    )
    w = SelectionWeights()
    first = m.select(w, {}, random.Random(seed))
    again = m.select(w, {}, random.Random(seed))
    assert first is not None and again is not None and first["node_id"] == again["node_id"]
    best = max(m.priority(n["node_id"], w, {}) for n in m.frontier())
    assert m.priority(first["node_id"], w, {}) >= best - 1e-9


raw_values = st.one_of(st.none(), st.floats(-1e6, 1e6, allow_nan=False), st.integers(-100, 100))


@settings(max_examples=100, deadline=None)
@given(
    st.lists(
        st.fixed_dictionaries(
            {
                "score": raw_values,
                "difficulty": raw_values,
                "factor": raw_values,
                "rating": raw_values,
                "confidence": raw_values,
                "impact": raw_values,
                "solved": st.booleans(),
                "parent": st.integers(0, 10),
            }
        ),
        min_size=1,
        max_size=8,
    )
)
def test_loading_clamps_everything_and_is_idempotent(specs: list[dict[str, Any]]) -> None:
    nodes: list[dict[str, Any]] = [{"node_id": "r", "parent_id": None, "node_type": "root"}]
    for i, sp in enumerate(specs):
        nodes.append(
            {
                "node_id": f"x{i}",
                "parent_id": nodes[sp["parent"] % len(nodes)]["node_id"],
                "action": {
                    "title": f"t{i}",
                    "score_0_to_1": sp["score"],
                    "difficulty_1_to_5": sp["difficulty"],
                    "expected_vs_baseline_factor": sp["factor"],
                },
                "impacts": {"memory_bandwidth": {"rating_0_to_10": sp["impact"]}},
                "overall_rating_0_to_10": sp["rating"],
                "confidence_0_to_1": sp["confidence"],
                "solution_ref": {"solution_id": f"s{i}", "eval": {"score": 1.0}} if sp["solved"] else None,
            }
        )
    m = WorldModel.from_json({"decision_tree": {"root_id": "r", "nodes": nodes}})
    for n in m.nodes()[1:]:
        a = n["action"]
        assert 0.0 <= a["score_0_to_1"] <= 1.0 and 1 <= a["difficulty_1_to_5"] <= 5
        assert a["expected_vs_baseline_factor"] > 0
        assert 0.0 <= n["overall_rating_0_to_10"] <= 10.0 and 0.0 <= n["confidence_0_to_1"] <= 1.0
        assert 0.0 <= n["impacts"]["memory_bandwidth"]["rating_0_to_10"] <= 10.0
    assert WorldModel.from_json(m.to_json()) == m
    assert [n["node_id"] for n in m.frontier()] == reference_frontier(m)
