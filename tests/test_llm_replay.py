"""Record and replay: a recorded run answers again without network, exactly; strict replay stops at a diverged prompt."""

from __future__ import annotations

import socket
from dataclasses import asdict
from typing import Any

import pytest
from fake_llm_server import Fail, FakeLLMServer, KSearchScript, Reply, initial_world_model, softmax_ctx

from ksearch.config import LLMConfig
from ksearch.errors import PolicyError, ReplayMismatch
from ksearch.policy.base import Attempt, CallRecord, Feedback, ImplementRequest, PolicyContext
from ksearch.policy.llm import make_policy
from ksearch.policy.llm.policy import LLMPolicy
from ksearch.store.db import RunStore

FIELDS = ("role", "model", "prompt", "response", "tokens_in", "tokens_out", "latency_s", "cost_usd", "retries",
          "error")


def conversation(pol: LLMPolicy, ctx: PolicyContext, resumed: bool = False) -> list[Any]:
    """A fixed sequence of questions; failures are results too (the loop survives them)."""
    out: list[Any] = []
    node = initial_world_model()["decision_tree"]["nodes"][1]

    def ask(fn: Any, *args: Any) -> None:
        try:
            out.append(fn(ctx, *args))
        except PolicyError as exc:
            out.append(f"PolicyError: {exc}")

    if not resumed:  # a resumed policy has its analysis already
        ask(pol.analyse)
    ask(pol.init_world_model, "analysis")
    for mode, fb in (("first", None), ("debug", Feedback("runtime_error", "NameError", 0.0)),
                     ("improve", Feedback("passed", "", 1.2, speedups={"w": 1.2}))):
        req = ImplementRequest(node, mode, ctx.task.starting_source("cpu"), None, fb, [], None, 0.0)  # type: ignore[arg-type]
        ask(pol.implement, req)
    ask(pol.update, initial_world_model(), [Attempt("c0000", "n1", "first", "passed", 1.2)], None)
    return out


def record(tmp_path: Any) -> tuple[list[Any], list[dict[str, Any]], LLMConfig]:
    with FakeLLMServer(KSearchScript()) as server:
        # A retried call, a repaired answer, and a call that fails for good: all must replay the same.
        server.push(Fail(429), Reply("analysis text"), Reply("not json at all"), Reply('{"nope": 1}'),
                    Fail(500), Fail(500))
        cfg = LLMConfig(preset="openai", base_url=server.url, model="fake-model", max_retries=1)
        store = RunStore(tmp_path / "rec", create=True)
        ctx = softmax_ctx()
        ctx.record_call = lambda c: store.add_call(0, c)
        results = conversation(make_policy(cfg, backoff_base_s=0.001, environ={}), ctx)
        calls = store.calls()
        store.close()
    return results, calls, cfg


def block_network(monkeypatch: Any) -> None:
    def refuse(*_a: Any, **_k: Any) -> None:
        raise AssertionError("replay touched the network")

    monkeypatch.setattr(socket.socket, "connect", refuse)


def test_replay_is_exact_and_offline(tmp_path, monkeypatch):
    results, calls, cfg = record(tmp_path)
    block_network(monkeypatch)
    assert any(c["retries"] for c in calls) and any(c["error"] for c in calls)
    assert any(c["role"] == "repair" for c in calls)
    assert any(isinstance(r, str) and r.startswith("PolicyError") for r in results)
    replayed: list[CallRecord] = []
    for strict in (False, True):
        replayed.clear()
        ctx = softmax_ctx(replayed)
        again = conversation(make_policy(cfg, replay=calls, strict_prompts=strict, environ={}), ctx)
        assert again == results
        assert [{k: asdict(c)[k] for k in FIELDS} for c in replayed] == [{k: c[k] for k in FIELDS} for c in calls]


def test_strict_replay_stops_at_the_first_differing_prompt(tmp_path):
    _, calls, cfg = record(tmp_path)
    ctx = softmax_ctx()
    ctx.spec = "a spec the recording never saw"
    pol = make_policy(cfg, replay=calls, strict_prompts=True, environ={})
    with pytest.raises(ReplayMismatch) as info:
        conversation(pol, ctx)
    msg = str(info.value)
    assert "\n" not in msg and "call 0 (analysis)" in msg and "line " in msg and "recorded" in msg
    assert "## Spec" in msg  # the first differing line, quoted


def test_strict_mismatch_names_the_line(tmp_path):
    _, calls, cfg = record(tmp_path)
    ctx = softmax_ctx()
    pol = make_policy(cfg, replay=calls, strict_prompts=True, environ={})
    pol.analyse(ctx)
    with pytest.raises(ReplayMismatch) as info:
        pol.analyse(ctx)  # the recording's call 1 is the world-model init, not another analysis
    assert "call 1" in str(info.value)
    calls2 = [dict(c) for c in calls]
    calls2[0]["prompt"] = calls2[0]["prompt"].replace("## Task: softmax", "## Task: other")
    with pytest.raises(ReplayMismatch) as info:
        make_policy(cfg, replay=calls2, strict_prompts=True, environ={}).analyse(softmax_ctx())
    assert "call 0 (analysis)" in str(info.value) and "'## Task: other" in str(info.value)


def test_lenient_replay_ignores_prompt_changes(tmp_path):
    results, calls, cfg = record(tmp_path)
    ctx = softmax_ctx()
    ctx.spec = "a different spec"
    assert conversation(make_policy(cfg, replay=calls, environ={}), ctx) == results


def test_replay_past_the_recording_stops(tmp_path):
    _, calls, cfg = record(tmp_path)
    pol = make_policy(cfg, replay=calls[:1], environ={})
    pol.analyse(softmax_ctx())
    with pytest.raises(ReplayMismatch, match="ran past the recording"):
        pol.init_world_model(softmax_ctx(), "")


def test_replay_resumes_from_policy_state(tmp_path):
    results, calls, cfg = record(tmp_path)
    first = make_policy(cfg, replay=calls, environ={})
    ctx = softmax_ctx()
    first.analyse(ctx)
    resumed = make_policy(cfg, replay=calls, environ={})
    resumed.load_state(first.state())
    assert conversation(resumed, ctx, resumed=True) == results[1:]


def test_feedback_is_normalised_before_it_reaches_a_prompt():
    from ksearch.harness.result import EvalResult
    from ksearch.policy.stable import stable_text

    raw = ('Traceback (most recent call last):\n  File "/tmp/ksearch-candidate-q1w2e3r4/candidate.py", line 5, in run\n'
           "NameError: <function run at 0x7f3a9c2b1d30> in worker 48213 (pid=48213); tmp/tmpk3j_2x9a.py\n"
           "the worker claims 0.1234s inside 1.5e-05s; Current thread 0x00007f0c8b2fd740; took 12.5 seconds\n"
           "the candidate exceeded the 10s time limit")
    clean = stable_text(raw)
    for noise in ("q1w2e3r4", "0x7f3a9c2b1d30", "48213", "tmpk3j_2x9a", "0.1234", "1.5e-05", "12.5"):
        assert noise not in clean, noise
    assert 'File "<tmp>/candidate.py", line 5, in run' in clean
    assert "worker <pid> (pid=<pid>)" in clean and "0x<addr>" in clean and "<t>s" in clean
    assert "the 10s time limit" in clean  # a limit is not a measurement
    assert stable_text(raw.replace("q1w2e3r4", "zz99yy88").replace("48213", "51007")) == clean
    fb = Feedback.from_result(EvalResult(status="runtime_error", message=raw))
    assert fb.message == clean


def test_strict_replay_compares_questions_not_measurements():
    from ksearch.policy.llm.replay import first_difference, same_question

    recorded = ("# Code: improve\nBest score so far: 1.27.\n| w | 12.3 | 1.3x |\n```python\nK = 0.5\n```\n"
                '```\nFile "/tmp/ksearch-candidate-abcdefgh/candidate.py", line 5\n```\n')
    now = recorded.replace("1.27", "1.273").replace("12.3", "11.9").replace("1.3x", "1.25x").replace(
        "abcdefgh", "hgfedcba")
    assert same_question(recorded, now)
    # The code, the words and the statuses must stay the same.
    assert not same_question(recorded, now.replace("K = 0.5", "K = 0.25"))
    assert not same_question(recorded, now.replace("improve", "debug"))
    assert not same_question(recorded + "- c0003 (debug): runtime_error\n", now + "- c0004 (debug): runtime_error\n")
    assert "K = 0.25" in first_difference(recorded, recorded.replace("K = 0.5", "K = 0.25"))
