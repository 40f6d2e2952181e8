"""The LLM policy end to end against the fake server: the K-Search questions, repair, faults, caps, records."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from fake_llm_server import (
    SOFTMAX_KERNELS,
    Drop,
    Fail,
    FakeLLMServer,
    KSearchScript,
    Reply,
    header,
    initial_world_model,
    softmax_ctx,
)

from ksearch.config import LLMConfig
from ksearch.errors import BudgetExhausted, PolicyError
from ksearch.policy.base import (
    Attempt,
    CallRecord,
    Feedback,
    ImplementRequest,
    PolicyContext,
)
from ksearch.policy.llm import make_policy
from ksearch.policy.llm.policy import LLMPolicy
from ksearch.store.db import RunStore


def policy_for(server: FakeLLMServer, tmp_path: Path, **cfg: object) -> LLMPolicy:
    prices = tmp_path / "prices.json"
    prices.write_text('{"fake-model": {"input": 1.0, "output": 4.0}}')
    settings = {"preset": "openai", "base_url": server.url, "model": "fake-model", "max_retries": 3,
                "request_timeout_s": 2.0, **cfg}
    return make_policy(LLMConfig(**settings), prices=prices, backoff_base_s=0.001, environ={}, seed=0)  # type: ignore[arg-type]


def request(ctx: PolicyContext, mode: str = "first", feedback: Feedback | None = None,
            history: list[Attempt] | None = None, source: str | None = "start") -> ImplementRequest:
    """A request as the loop builds it; `source` is the code to work on ("start": the naive starting kernel)."""
    node = initial_world_model()["decision_tree"]["nodes"][1]
    code = ctx.task.starting_source("cpu") if source == "start" else source
    return ImplementRequest(action=node, mode=mode, parent_source=code,  # type: ignore[arg-type]
                            parent_params=None, feedback=feedback, history=history or [], best_source=None,
                            best_score=0.0)


@pytest.fixture
def server():
    with FakeLLMServer(KSearchScript()) as s:
        yield s


def test_the_k_search_questions_are_answered_and_recorded(server, tmp_path):
    calls: list[CallRecord] = []
    ctx = softmax_ctx(calls)
    pol = policy_for(server, tmp_path)
    analysis = pol.analyse(ctx)
    wm = pol.init_world_model(ctx, analysis)
    src, params = pol.implement(ctx, request(ctx))
    edit = pol.update(ctx, wm, [Attempt("c0001", "n1", "first", "passed", 1.3, improved=True)], None)
    assert "Classification" in analysis and wm["decision_tree"]["root_id"] == "root"
    assert src == SOFTMAX_KERNELS["compiled"] and params == {}
    assert isinstance(edit["ops"], list)
    assert [c.role for c in calls] == ["analysis", "init", "code", "edit"]
    for c in calls:
        assert c.model == "fake-model" and c.error is None and c.retries == 0 and c.tokens_in > 0
        assert c.cost_usd == pytest.approx((c.tokens_in * 1.0 + c.tokens_out * 4.0) / 1e6)
        assert c.prompt.startswith("[system]\nYou are a GPU kernel performance engineer")
    st = pol.state()["budget"]
    assert st["cost_usd"] == pytest.approx(sum(c.cost_usd for c in calls))
    # The code prompt carries the contract, the dialect rule and the forbidden APIs.
    code_prompt = calls[2].prompt
    assert "run(x)" in code_prompt and "MLX operations only" in code_prompt and "mx.softmax" in code_prompt


def test_spec_and_port_context_reach_the_code_prompt(server, tmp_path):
    calls: list[CallRecord] = []
    ctx = softmax_ctx(calls)
    ctx.spec = "SPEC-MARKER: threadgroup memory is 32 KB"
    ctx.port_context = {"kernel": "softmax_kernel", "shared_bytes": 4096}
    pol = policy_for(server, tmp_path)
    pol.implement(ctx, request(ctx))
    assert "SPEC-MARKER" in calls[0].prompt and "softmax_kernel" in calls[0].prompt


def test_broken_json_gets_one_repair_round(server, tmp_path):
    calls: list[CallRecord] = []
    ctx = softmax_ctx(calls)
    server.push(Reply('{"kernel_summary": "x", "decision_tree": {"root_id": "root", "nodes": ['))
    wm = policy_for(server, tmp_path).init_world_model(ctx, "analysis")
    assert wm == initial_world_model()
    assert [c.role for c in calls] == ["init", "repair"]
    assert "does not parse" in calls[1].prompt and '"decision_tree": {"root_id": "root", "nodes": [' in calls[1].prompt


def test_unusable_after_repair_is_a_policy_error_with_both_calls_recorded(server, tmp_path):
    calls: list[CallRecord] = []
    ctx = softmax_ctx(calls)
    server.push(Reply("I'd rather not."), Reply("Still prose."))
    with pytest.raises(PolicyError, match="after one repair round"):
        policy_for(server, tmp_path).update(ctx, initial_world_model(), [], None)
    assert [c.role for c in calls] == ["edit", "repair"]


def test_truncated_code_is_repaired(server, tmp_path):
    calls: list[CallRecord] = []
    ctx = softmax_ctx(calls)
    server.push(Reply("```python\nimport mlx.core as mx\n\ndef run(x):\n    xf = x.astype(", finish_reason="length"))
    src, _ = policy_for(server, tmp_path).implement(ctx, request(ctx))
    assert src == SOFTMAX_KERNELS["compiled"]
    assert [c.role for c in calls] == ["code", "repair"] and "not closed" in calls[1].prompt


def test_faults_are_retried_and_the_retries_recorded(server, tmp_path):
    calls: list[CallRecord] = []
    ctx = softmax_ctx(calls)
    server.push(Fail(429), Fail(500), Drop(), Reply("slow", delay_s=0.8))
    pol = policy_for(server, tmp_path, request_timeout_s=0.3, max_retries=4)
    src, _ = pol.implement(ctx, request(ctx))
    assert src == SOFTMAX_KERNELS["compiled"]
    assert calls[0].retries == 4 and calls[0].error is None


def test_exhausted_retries_are_a_policy_error_and_recorded(server, tmp_path):
    calls: list[CallRecord] = []
    ctx = softmax_ctx(calls)
    server.push(Fail(503), Fail(503), Fail(503))
    pol = policy_for(server, tmp_path, max_retries=2)
    with pytest.raises(PolicyError, match="HTTP 503"):
        pol.implement(ctx, request(ctx))
    assert len(calls) == 1 and calls[0].retries == 2 and "HTTP 503" in (calls[0].error or "")
    assert calls[0].response == "" and pol.state()["failures"] == 1
    assert pol.implement(ctx, request(ctx))[0]  # the next question works again


def test_token_cap_stops_before_the_next_call(server, tmp_path):
    calls: list[CallRecord] = []
    ctx = softmax_ctx(calls)
    # Room for the analysis prompt and a short answer, not for a second question (tests/test_llm_caps.py has the
    # boundary itself).
    pol = policy_for(server, tmp_path, max_tokens_total=1200)
    pol.analyse(ctx)
    before = len(server.chat_requests())
    with pytest.raises(BudgetExhausted, match="token cap"):
        pol.implement(ctx, request(ctx))
    assert len(server.chat_requests()) == before and len(calls) == 1


def test_usd_cap(server, tmp_path):
    ctx = softmax_ctx()
    pol = policy_for(server, tmp_path, max_usd=2e-3)  # $1 / $4 per M tokens: one analysis fits, not two
    pol.analyse(ctx)
    with pytest.raises(BudgetExhausted, match="spending cap"):
        pol.analyse(ctx)


def test_rejection_reason_reaches_the_edit_prompt(server, tmp_path):
    calls: list[CallRecord] = []
    ctx = softmax_ctx(calls)
    reason = "ops[0] (insert_node): parent_id 'n9' does not exist; ids are root, n1, n2"
    policy_for(server, tmp_path).update(ctx, initial_world_model(), [], reason)
    assert reason in calls[0].prompt and "previous edit was rejected" in calls[0].prompt


def test_debug_prompt_shows_failed_code_and_feedback_improve_shows_numbers(server, tmp_path):
    calls: list[CallRecord] = []
    ctx = softmax_ctx(calls)
    pol = policy_for(server, tmp_path)
    first, _ = pol.implement(ctx, request(ctx))
    fb = Feedback("runtime_error", "NameError: name 'undefined_name' is not defined", 0.0)
    failed = SOFTMAX_KERNELS["broken"]
    pol.implement(ctx, request(ctx, "debug", fb, [Attempt("c0001", "n1", "first", "runtime_error", 0.0)], failed))
    assert "# Code: debug" in calls[1].prompt and failed.strip() in calls[1].prompt
    assert "NameError" in calls[1].prompt and "c0001 (first): runtime_error" in calls[1].prompt
    fb = Feedback("passed", "", 1.25, speedups={"cpu_256x1024_f32": 1.25}, latencies_s={"cpu_256x1024_f32": 8e-5},
                  baseline_latencies_s={"cpu_256x1024_f32": 1e-4}, roofline={"cpu_256x1024_f32": 0.31})
    pol.implement(ctx, request(ctx, "improve", fb, source=None))  # no code given: the last proposal stands in
    assert "# Code: improve" in calls[2].prompt and SOFTMAX_KERNELS["exp2"].strip() in calls[2].prompt
    assert "| cpu_256x1024_f32 | 80.0 | 100.0 | 1.25 | 0.31 |" in calls[2].prompt


def test_state_round_trip(server, tmp_path):
    ctx = softmax_ctx()
    pol = policy_for(server, tmp_path)
    pol.analyse(ctx)
    pol.implement(ctx, request(ctx))
    again = policy_for(server, tmp_path)
    again.load_state(pol.state())
    assert again.state() == pol.state()


def mini_loop(pol: LLMPolicy, ctx: PolicyContext, store: RunStore, cycles: int = 2) -> None:
    """The shape of the search loop, enough to put every kind of call (and failure) into a run directory."""
    log = logging.getLogger("ksearch.test")
    try:
        analysis = pol.analyse(ctx)
    except PolicyError as exc:
        store.add_event(0, "policy_error", {"error": str(exc)})
        analysis = ""
    try:
        wm = pol.init_world_model(ctx, analysis)
    except PolicyError as exc:
        store.add_event(0, "policy_error", {"error": str(exc)})
        wm = initial_world_model()  # the loop's deterministic fallback
    store.add_world_model(0, wm, "init")
    for r in range(cycles):
        ctx.round = r
        attempts = []
        for mode in ("first", "improve"):
            try:
                proposal = pol.implement(ctx, request(ctx, mode))
            except PolicyError as exc:
                log.warning("policy error: %s", exc)
                store.add_event(r, "policy_error", {"error": str(exc)})
                continue
            if proposal is None:
                continue
            src, params = proposal
            row = store.add_candidate(src, src, r, "n1", None, "t", mode, params)
            attempts.append(Attempt(row.id, "n1", mode, "passed", 1.0 + r))  # type: ignore[arg-type]
        try:
            edit = pol.update(ctx, wm, attempts, None)
            store.add_event(r, "edit", edit)
        except PolicyError as exc:
            store.add_event(r, "policy_error", {"error": str(exc)})
    store.set_meta("policy_state", pol.state())


def test_api_key_never_reaches_the_run_directory_logs_or_errors(tmp_path, caplog):
    secret = "sk-live-DO-NOT-LEAK-9f8e7d6c5b4a"
    with FakeLLMServer(KSearchScript()) as server:
        # Some proxies echo the request's credentials in their error bodies: the key must not travel on from there.
        server.push(Reply("analysis"), Fail(500, f"upstream said: Bearer {secret}"),
                    Fail(401, f"invalid key {secret}"))
        store = RunStore(tmp_path / "run", create=True)
        calls: list[CallRecord] = []
        ctx = softmax_ctx(calls)
        ctx.record_call = lambda c: (calls.append(c), store.add_call(ctx.round, c))  # type: ignore[func-returns-value]
        pol = make_policy(LLMConfig(preset="openai", base_url=server.url, api_key_env="TEST_SECRET_KEY",
                                    model="fake-model", max_retries=1),
                          backoff_base_s=0.001, environ={"TEST_SECRET_KEY": secret})
        with caplog.at_level(logging.DEBUG):
            mini_loop(pol, ctx, store)
        store.close()
        assert all(header(r, "authorization") == f"Bearer {secret}" for r in server.chat_requests())
    assert any(c.error for c in calls) and any(c.role == "code" and not c.error for c in calls)
    blobs = [p.read_bytes() for p in (tmp_path / "run").rglob("*") if p.is_file()]
    assert blobs and all(secret.encode() not in b for b in blobs)
    assert secret not in caplog.text
    assert secret not in repr(pol.state()) and secret not in repr(calls)
