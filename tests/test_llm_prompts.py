"""Snapshots of every prompt the LLM policy renders, from a fixed search state: the analysis, the initial world model,
the three code prompts, the world-model edit after a cycle, the frontier refresh, a repair round, and a code prompt
fitted to a small context. Each is compared with its golden file under tests/data/prompts/; after an intended change
to a prompt, write them again with

    KSEARCH_REGEN_PROMPTS=1 pytest tests/test_llm_prompts.py

and read the diff before committing it."""

from __future__ import annotations

import difflib
import json
import os
import random
from pathlib import Path
from typing import Any

import pytest

from ksearch.backends import Backend
from ksearch.policy.base import Attempt, CycleEvidence, Feedback, ImplementRequest, PolicyContext
from ksearch.policy.llm.client import Outcome
from ksearch.policy.llm.policy import LLMPolicy
from ksearch.policy.llm.pricing import Budget
from ksearch.policy.llm.replay import render_prompt
from ksearch.tasks import get_task
from ksearch.worldmodel import ANALYSIS_HEADING, WorldModel

GOLDEN = Path(__file__).parent / "data" / "prompts"
REGEN = os.environ.get("KSEARCH_REGEN_PROMPTS") == "1"

ANALYSIS = ("## Classification\nreduction (row softmax), dense access.\n## Bottleneck per regime\nbandwidth at every "
            "workload: two reads and one write per element.\n## Kernel families\n1. fused passes\n2. exp2 trick")
START = "import mlx.core as mx\n\n\ndef run(x):\n    return mx.softmax(x, axis=-1)\n"
FUSED = ("import mlx.core as mx\n\n\n@mx.compile\ndef run(x):\n    e = mx.exp(x - mx.max(x, axis=-1, keepdims=True))\n"
         "    return e / mx.sum(e, axis=-1, keepdims=True)\n")
BROKEN = "import mlx.core as mx\n\n\ndef run(x):\n    return mx.exp2(x * 1.4427) / mx.sum(x)\n"
LATEST = FUSED.replace("e / mx.sum", "e * mx.reciprocal(mx.sum").replace("keepdims=True)\n", "keepdims=True))\n", 1)


class FixedBackend(Backend):
    """The CPU backend with a fixed hardware profile: the golden files must not depend on the machine."""

    def profile(self) -> dict[str, Any]:
        return {"device": "Test CPU", "cores": 2, "memory_gb": 8, "bandwidth_gbs": 20}


class Recorder:
    """A transport that records each request and answers by role."""

    def __init__(self) -> None:
        self.requests: list[list[dict[str, str]]] = []
        self.code_answers: list[str] = []

    def complete(self, role: str, model: str | None, messages: list[dict[str, str]], *, json_mode: bool = False,
                 schema: str | None = None, max_tokens: int | None = None) -> Outcome:
        self.requests.append([dict(m) for m in messages])
        if role == "analysis":
            text = ANALYSIS
        elif role == "init":
            text = json.dumps(world_model().to_json())
        elif role in ("code", "repair") and not json_mode:
            text = self.code_answers.pop(0) if self.code_answers else f"```python\n{FUSED}```"
        else:
            text = '{"active_leaf_id": null, "ops": []}'
        return Outcome(text=text, model=model or "fake-model", tokens_in=100, tokens_out=50)


def ctx() -> PolicyContext:
    return PolicyContext(task=get_task("softmax"), backend=FixedBackend("mlx-cpu", "cpu"), rng=random.Random(0),
                         spec="Dialect: MLX operations only on the CPU; fuse with mx.compile.", round=3)


def world_model() -> WorldModel:
    """A tree in the middle of a search: n1 solved (1.3x), its follow-up n4 in work, n2 too hard, n3 not tried."""
    def action(title: str, score: float, factor: float) -> dict[str, Any]:
        return {"title": title, "description": f"{title} for row softmax", "difficulty_1_to_5": 2,
                "score_0_to_1": score, "expected_vs_baseline_factor": factor, "rationale": "fewer passes",
                "overall_rating_0_to_10": 7, "confidence_0_to_1": 0.6,
                "notes": "CURRENT: naive. FOLLOW_THROUGH: implement. UPDATE_BELIEF: none yet."}

    wm = WorldModel.new("Row softmax: two reductions and an elementwise pass; bandwidth bound.", [
        action("Fuse the passes with mx.compile", 0.7, 1.3), action("Accumulate in float16", 0.4, 1.5),
        action("exp2 with hex-float log2(e)", 0.6, 1.1)])
    wm.data["open_questions"] = ["does fusion pay on CPU?", "is exp the bottleneck at 4096 columns?"]
    wm.annotate_root(ANALYSIS_HEADING, ANALYSIS)
    wm.attach_solution("n1", "c0002", "c0001", "passed", 1.3, round_=1)
    wm.mark_too_hard("n2", "no attempt passed (last: wrong_answer)", 2)
    wm.apply_edits({"ops": [{"op": "insert_node", "parent_id": "n1", "node": {
        "action": action("Multiply by the reciprocal of the sum", 0.65, 1.45),
        "notes": "CURRENT: fused. FOLLOW_THROUGH: replace the divide. UPDATE_BELIEF: fusion helped."}}]}, 2)
    return wm


def feedback(status: str, score: float, message: str = "") -> Feedback:
    if status != "passed":
        return Feedback(status=status, message=message, score=0.0)
    return Feedback(status="passed", message=message, score=score,
                    speedups={"cpu_256x1024_f32": score * 0.9, "cpu_128x4096_f32": score * 1.1},
                    latencies_s={"cpu_256x1024_f32": 2.0e-4, "cpu_128x4096_f32": 4.5e-4},
                    baseline_latencies_s={"cpu_256x1024_f32": 2.0e-4 * score * 0.9,
                                          "cpu_128x4096_f32": 4.5e-4 * score * 1.1},
                    roofline={"cpu_256x1024_f32": 0.21, "cpu_128x4096_f32": 0.34})


def policy(context_tokens: int | None = None) -> tuple[LLMPolicy, Recorder]:
    rec = Recorder()
    pol = LLMPolicy(rec, Budget(warn_unpriced=False), "reasoner", "coder", context_tokens=context_tokens)
    pol.analysis = ANALYSIS
    return pol, rec


def request(mode: str, **extra: Any) -> ImplementRequest:
    wm = world_model()
    fields: dict[str, Any] = {"action": wm.node("n4"), "mode": mode, "parent_source": FUSED, "parent_params": None,
                              "feedback": None, "history": [], "best_source": None, "best_score": 1.3,
                              "world_model": wm.to_json(), "parent_score": 1.3}
    fields.update(extra)
    return ImplementRequest(**fields)


HISTORY = [Attempt("c0005", "n4", "first", "compile_error", 0.0, "SyntaxError: invalid syntax (line 6)"),
           Attempt("c0006", "n4", "debug", "passed", 1.38, "", improved=True),
           Attempt("c0007", "n4", "improve", "passed", 1.36, "")]


def check(name: str, text: str) -> None:
    path = GOLDEN / f"{name}.txt"
    if REGEN:
        GOLDEN.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        return
    assert path.is_file(), f"no golden file {path}; write it with KSEARCH_REGEN_PROMPTS=1"
    want = path.read_text()
    diff = "".join(difflib.unified_diff(want.splitlines(True), text.splitlines(True), "golden", "rendered"))
    assert text == want, f"{name} differs from its golden file (KSEARCH_REGEN_PROMPTS=1 writes it again):\n{diff}"


def last_prompt(rec: Recorder) -> str:
    return render_prompt(rec.requests[-1])


def test_analysis_and_initial_world_model_prompts() -> None:
    pol, rec = policy()
    pol.analyse(ctx())
    check("analysis", last_prompt(rec))
    pol.init_world_model(ctx(), ANALYSIS)
    check("world_model_init", last_prompt(rec))


def test_code_first_prompt_carries_the_world_model_around_the_action() -> None:
    pol, rec = policy()
    pol.implement(ctx(), request("first", best_source=FUSED.replace("e / mx.sum", "e * 1.0 / mx.sum")))
    text = last_prompt(rec)
    check("code_first", text)
    # The path from the root, the siblings' outcomes and the open questions (K-Search's compact world model).
    assert "- n1 'Fuse the passes with mx.compile' (solved, score 1.3)" in text
    assert "<- this action" in text and "does fusion pay on CPU?" in text
    assert "The best kernel of the whole search so far" in text


def test_code_debug_prompt_shows_the_code_the_action_started_from() -> None:
    pol, rec = policy()
    pol.implement(ctx(), request("debug", parent_source=BROKEN, base_source=FUSED, history=HISTORY[:1],
                                 feedback=feedback("compile_error", 0.0, "SyntaxError: invalid syntax (line 6)")))
    text = last_prompt(rec)
    check("code_debug", text)
    assert text.index("The code this action started from") < text.index("The attempt that failed")


def test_code_improve_prompt_shows_the_latest_attempt_beside_the_best() -> None:
    pol, rec = policy()
    pol.implement(ctx(), request("improve", parent_source=FUSED, latest_source=LATEST, history=HISTORY,
                                 feedback=feedback("passed", 1.36), best_feedback=feedback("passed", 1.38),
                                 base_source=START, best_source=START.replace("softmax", "softmax ")))
    text = last_prompt(rec)
    check("code_improve", text)
    best, latest = text.index("The best kernel for this action so far"), text.index("The latest attempt")
    assert best < text.index("score 1.38") < latest < text.index("score 1.36")
    assert LATEST.strip() in text and "cycle ends unless this action beats it" in text
    # The parent's code is there whatever the scores (a replay measuring again asks the same questions).
    assert "## The code this action started from (the parent node's kernel, score 1.3)" in text


def test_code_improve_prompt_without_a_newer_attempt_shows_one_verdict() -> None:
    pol, rec = policy()
    pol.implement(ctx(), request("improve", parent_source=LATEST, history=HISTORY[1:2], base_source=FUSED,
                                 feedback=feedback("passed", 1.2), best_feedback=feedback("passed", 1.2)))
    text = last_prompt(rec)
    assert FUSED.strip() in text and "The latest attempt" not in text and text.count("Harness verdict") == 1


def test_world_model_edit_prompt_carries_code_verdict_and_prediction() -> None:
    pol, rec = policy()
    wm = world_model()
    evidence = CycleEvidence(node_id="n4", end_reason="3 attempts in a row did not improve on the cycle's best",
                             code=FUSED, code_candidate="c0006", verdict=feedback("passed", 1.38, "warm-up ok"),
                             expected=1.45, measured=1.38, parent_score=1.3)
    long_message = "Traceback (most recent call last):\n" + "  line\n" * 60 + "ValueError: shapes differ"
    cycle = [*HISTORY, Attempt("c0008", "n4", "improve", "runtime_error", 0.0, long_message[-500:])]
    pol.update(ctx(), wm.to_json(), cycle, None, evidence)
    text = last_prompt(rec)
    check("world_model_edit", text)
    assert "ValueError: shapes differ" in text  # attempt messages are not cut to a few words
    assert "predicted 1.45x" in text and "measured 1.38x (0.95 of the prediction)" in text
    assert text.index("## The analysis of the task") < text.index("## The world model now")
    assert "(the analysis is quoted above)" in text and text.count("## Classification") == 1


def test_frontier_refresh_prompt_says_what_is_missing() -> None:
    pol, rec = policy()
    needs = ["only 2 action(s) are ready to try; the frontier needs at least 3",
             "no action ready to try has score_0_to_1 above 0.5"]
    pol.refresh(ctx(), world_model().to_json(), needs, "after your edit, still missing: x")
    text = last_prompt(rec)
    check("world_model_refresh", text)
    assert all(n in text for n in needs) and "## The analysis of the task" in text
    assert text.startswith("[system]") and "# World model: edit (frontier refresh" in text


def test_repair_prompt() -> None:
    pol, rec = policy()
    rec.code_answers = ["I would rather describe it in words.", f"```python\n{FUSED}```"]
    pol.implement(ctx(), request("first"))
    check("repair", rec.requests[-1][-1]["content"])


def test_a_code_prompt_fitted_to_a_small_context_keeps_the_code() -> None:
    pol, rec = policy(context_tokens=2300)
    pol.implement(ctx(), request("improve", parent_source=FUSED, latest_source=LATEST, history=HISTORY,
                                 feedback=feedback("passed", 1.36), best_feedback=feedback("passed", 1.38),
                                 base_source=START, best_source=START.replace("softmax", "softmax ")))
    text = last_prompt(rec)
    check("code_improve_fitted", text)
    assert FUSED.strip() in text and LATEST.strip() in text
    assert "The best kernel of the whole search" not in text and "Attempts at this action" not in text


@pytest.mark.parametrize("name", ["analysis", "world_model_init", "code_first", "code_debug", "code_improve",
                                  "world_model_edit", "world_model_refresh", "repair", "code_improve_fitted"])
def test_every_golden_file_is_used(name: str) -> None:
    assert (GOLDEN / f"{name}.txt").is_file() or REGEN
