"""A small, realistic run fabricated through RunStore, for the report/compare/export/watch tests.

It has what a finished K-Search run on softmax/mlx-cpu leaves behind: 12 candidates, one search evaluation each with a
mix of statuses, a holdout evaluation of the best, three world-model snapshots, two LLM calls and loop events. The best
candidate's source is a real kernel, so that its export can be judged by `ksearch eval`.
"""

from __future__ import annotations

import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from ksearch.harness.result import EvalResult, WorkloadResult, geomean
from ksearch.store import RunStore

NAIVE = """import mlx.core as mx


def run(x):
    xf = x.astype(mx.float32)
    m = mx.max(xf, axis=-1, keepdims=True)
    e = mx.exp(xf - m)
    return (e / mx.sum(e, axis=-1, keepdims=True)).astype(x.dtype)
"""

BEST = '''"""Row softmax: one max, one exp, a reciprocal multiply instead of a divide per element."""
import mlx.core as mx


def run(x):
    xf = x.astype(mx.float32)
    e = mx.exp(xf - mx.max(xf, axis=-1, keepdims=True))
    inv = mx.reciprocal(mx.sum(e, axis=-1, keepdims=True))
    return (e * inv).astype(x.dtype)
'''

SEARCH_WORKLOADS = ["cpu_256x1024_f32", "cpu_128x4096_f32", "cpu_256x1024_f16"]
HOLDOUT_WORKLOAD = "cpu_100x3000_f32"

# (node, action, status, score) per evaluation, in budget order; c0007 is the best.
PLAN: list[tuple[str, str, str, float]] = [
    ("n1", "Fuse max and exp into one pass", "passed", 1.02),
    ("n1", "Fuse max and exp into one pass", "compile_error", 0.0),
    ("n1", "Fuse max and exp into one pass", "passed", 1.05),
    ("n3", "Accumulate in float16", "wrong_answer", 0.0),
    ("n3", "Accumulate in float16", "wrong_answer", 0.0),
    ("n2", "Multiply by the reciprocal of the sum", "passed", 1.18),
    ("n2", "Multiply by the reciprocal of the sum", "runtime_error", 0.0),
    ("n2", "Multiply by the reciprocal of the sum", "passed", 1.31),
    ("n2", "Multiply by the reciprocal of the sum", "passed", 1.22),
    ("n5", "Process rows in blocks of 64", "timeout", 0.0),
    ("n5", "Process rows in blocks of 64", "passed", 1.12),
    ("n6", "Tile the columns for cache reuse", "passed", 0.97),
]
BEST_INDEX = 7  # c0007


def _result(status: str, score: float, split: str = "search") -> dict[str, Any]:
    names = [HOLDOUT_WORKLOAD] if split == "holdout" else SEARCH_WORKLOADS
    wls = []
    speeds = [score * f for f in (0.9, 1.05, 1 / (0.9 * 1.05))][: len(names)] if score else []
    for i, name in enumerate(names):
        if status == "passed":
            sp = speeds[i] if split == "search" else score
            base = 0.003 * (i + 1)
            wls.append(WorkloadResult(name, split, "passed", base / sp, 0.03, base, sp, 1e-6 * (i + 1), 2e-6,
                                      0.12 * sp, "worker"))
        else:
            wls.append(WorkloadResult(name, split, status, message=f"{status} on {name}"))
    res = EvalResult(status=status, message="" if status == "passed" else f"{status}: see the worker log\nline 2",
                     task="softmax", backend="mlx-cpu", baseline="native",
                     score=geomean([w.speedup for w in wls if w.speedup]) if status == "passed" else 0.0,
                     workloads=wls, environment={"backend": "mlx-cpu", "device": "AMD EPYC", "mlx": "0.32.4",
                                                 "ksearch": "0.1.0", "python": "3.11.9"},
                     duration_s=2.5)
    if split == "holdout":
        res.holdout_score = res.score
    return res.to_json()


def _holdout_result(again: float, held: float) -> dict[str, Any]:
    """The holdout evaluation as the harness makes it: the search workloads timed again (its score) beside the
    holdout ones (its holdout score)."""
    search, holdout = _result("passed", again), _result("passed", held, split="holdout")
    return {**holdout, "score": search["score"], "workloads": search["workloads"] + holdout["workloads"]}


def _node(nid: str, parent: str | None, title: str, rating: float, conf: float, sol: tuple[str, str, float] | None,
          notes: str = "") -> dict[str, Any]:
    return {
        "node_id": nid, "parent_id": parent, "node_type": "action", "decision": title, "choice": title,
        "notes": notes, "last_updated_round": 2,
        "action": {"title": title, "description": f"Try: {title.lower()}.", "difficulty_1_to_5": 2,
                   "score_0_to_1": rating / 10, "expected_vs_baseline_factor": 1.1 + rating / 20,
                   "rationale": "Softmax on CPU is bandwidth-bound; fewer passes over the row help."},
        "impacts": {"memory_bandwidth": {"rating_0_to_10": rating, "risk": "low", "notes": "one read fewer"}},
        "overall_rating_0_to_10": rating, "confidence_0_to_1": conf,
        "solution_ref": ({"solution_id": sol[0], "parent_solution_id": None,
                          "eval": {"status": sol[1], "score": sol[2], "score_name": "geomean_speedup"}}
                         if sol else None),
    }


def world_models() -> list[dict[str, Any]]:
    root = _node("root", None, "Row softmax on CPU: reduce passes over memory", 6.0, 0.5, None,
                 "CURRENT: analysis. UPDATE_BELIEF: bandwidth-bound at every size.")
    n1 = _node("n1", "root", "Fuse max and exp into one pass", 6.5, 0.6, ("c0002", "passed", 1.05))
    n2 = _node("n2", "n1", "Multiply by the reciprocal of the sum", 8.0, 0.7, ("c0007", "passed", 1.31),
               "CURRENT: best so far. FOLLOW_THROUGH: block rows next. PERF_GAP: predicted 1.2x, measured 1.31x.")
    n3 = _node("n3", "root", "Accumulate in float16", 3.0, 0.4, ("c0004", "wrong_answer", 0.0),
               "UPDATE_BELIEF: float16 sums lose too much precision for 4096 columns.")
    n4 = _node("n4", "root", "Online softmax in a single pass <script>alert(1)</script>", 5.0, 0.3, None)
    n5 = _node("n5", "n2", "Process rows in blocks of 64", 6.0, 0.5, ("c0010", "passed", 1.12))
    n6 = _node("n6", "root", "Tile the columns for cache reuse", 4.5, 0.4, ("c0011", "passed", 0.97))
    first = {"kernel_summary": "row softmax", "decision_tree": {"root_id": "root", "active_leaf_id": "n1",
                                                                 "nodes": [root, dict(n1, solution_ref=None), n3]}}
    second = {"kernel_summary": "row softmax", "decision_tree": {"root_id": "root", "active_leaf_id": "n2",
                                                                  "nodes": [root, n1, dict(n2, solution_ref=None), n3,
                                                                            n4]}}
    third = {"kernel_summary": "row softmax", "open_questions": ["does blocking help at 4096 columns?"],
             "decision_tree": {"root_id": "root", "active_leaf_id": "n5", "nodes": [root, n1, n2, n3, n4, n5, n6]}}
    return [first, second, third]


def make_fake_run(base: Path, run_id: str = "20261129-120000-softmax-abc123", status: str = "finished",
                  scale: float = 1.0, n_evals: int | None = None) -> Path:
    """A run directory under `base`. `scale` multiplies every score (to tell two runs apart in compare)."""
    path = base / run_id
    store = RunStore(path, create=True)
    plan = PLAN[: n_evals or len(PLAN)]
    best_id = f"c{BEST_INDEX:04d}" if len(plan) > BEST_INDEX else None
    t0 = time.time() - 600
    store.set_meta("task", "softmax")
    store.set_meta("backend", "mlx-cpu")
    store.set_meta("policy", "llm")
    store.set_meta("strategy", "ksearch")
    store.set_meta("budget", 12)
    store.set_meta("seed", 7)
    store.set_meta("config", {"stagnation_window": 5})
    store.set_meta("created_at", t0)
    store.set_meta("status", status)
    store.set_meta("environment", {"backend": "mlx-cpu", "device": "AMD EPYC", "mlx": "0.32.4"})
    wms = world_models()
    for i, (node, title, st, score) in enumerate(plan):
        rnd = i // 4
        if i % 4 == 0:
            store.add_world_model(rnd, wms[min(rnd, 2)], "initial" if rnd == 0 else "update")
            store.add_event(rnd, "select", {"node_id": node, "title": title, "priority": 0.8})
        src = BEST if i == BEST_INDEX else NAIVE.replace("def run", f"# variant {i}\ndef run")
        parent = f"c{i - 1:04d}" if i else None
        store.add_candidate(src, src, rnd, node, parent, title, "improve" if i else "seed", {})
        store.add_evaluation(f"c{i:04d}", i, rnd, "search", _result(st, score * scale))
        store.set_meta("evaluations_done", i + 1)
    store.add_event(1, "cycle_end", {"node_id": "n2", "best_score": 1.31 * scale, "attempts": 4})
    store.add_event(2, "backtrack", {"from": "n5", "to": "n6"})
    store.add_event(2, "too_hard", {"node_id": "n4"})
    for role, tin, tout, cost in (("analysis", 3200, 900, 0.0123), ("world_model", 5100, 1400, 0.0201)):
        store.add_call(0, SimpleNamespace(role=role, model="test-model", prompt="p", response="r", tokens_in=tin,
                                          tokens_out=tout, latency_s=2.0, cost_usd=cost, retries=0, error=None))
    store.set_meta("duplicates_skipped", 1)
    store.set_meta("llm_usage", {"tokens_in": 8300, "tokens_out": 2300, "cost_usd": 0.0324, "calls": 2})
    if best_id:
        store.set_meta("best_candidate", best_id)
        store.set_meta("best_score", 1.31 * scale)
        holdout = _holdout_result(1.22 * scale, 1.25 * scale)
        store.add_evaluation(best_id, len(plan), 3, "holdout", holdout)
        store.set_meta("holdout", holdout)
        store.write_best(BEST)
    if status != "running":
        store.set_meta("finished_at", t0 + 590)
    store.close()
    return path


def test_fake_run_is_readable(tmp_path: Path) -> None:
    from ksearch.report.rundata import load_run

    run = load_run(make_fake_run(tmp_path))
    assert len(run.candidates) == 12 and len(run.evaluations) == 12
    assert run.best_candidate == "c0007"
    assert [n["node_id"] for n in run.best_path()] == ["root", "n1", "n2"]
    assert run.attempts[-1].best_so_far == max(a.score for a in run.attempts)
