"""The live transport against the fake server: retries, timeouts, status handling, parameters, usage."""

from __future__ import annotations

import random

import pytest
from fake_llm_server import Drop, Fail, FakeLLMServer, Garbage, Reply, header

from ksearch.errors import CallFailed
from ksearch.policy.llm.client import Backoff, ChatClient, Sampling
from ksearch.policy.llm.presets import Endpoint

MSG = [{"role": "user", "content": "hello there"}]


def client(server: FakeLLMServer, *, retries: int = 4, timeout: float = 2.0, key_env: str | None = None,
           environ: dict[str, str] | None = None, model: str | None = "m", sleeps: list[float] | None = None,
           max_tokens_param: str = "max_tokens", sampling: Sampling | None = None) -> ChatClient:
    ep = Endpoint("test", server.url, key_env, model, model, max_tokens_param)
    slept = sleeps if sleeps is not None else []
    return ChatClient(ep, sampling or Sampling(), timeout_s=timeout, max_retries=retries,
                      backoff=Backoff(base_s=0.001, max_s=0.01), rng=random.Random(0), sleep=slept.append,
                      environ=environ or {})


@pytest.fixture
def server():
    with FakeLLMServer() as s:
        yield s


def test_answers_and_counts_usage(server):
    server.push(Reply("hi", tokens_in=11, tokens_out=3))
    out = client(server).complete("code", "m", MSG)
    assert (out.text, out.tokens_in, out.tokens_out, out.retries, out.finish_reason) == ("hi", 11, 3, 0, "stop")
    body = server.chat_requests()[0]["body"]
    assert body["model"] == "m" and body["messages"] == MSG and body["max_tokens"] == 8192


def test_every_transient_fault_is_retried_and_counted(server):
    sleeps: list[float] = []
    server.push(Fail(429), Fail(500), Fail(503), Drop(), Garbage(), Reply("done"))
    out = client(server, retries=5, sleeps=sleeps).complete("code", "m", MSG)
    assert out.text == "done" and out.retries == 5
    assert len(sleeps) == 5 and len(server.chat_requests()) == 6


def test_slow_answer_times_out_then_retry_succeeds(server):
    server.push(Reply("late", delay_s=1.0), Reply("on time"))
    out = client(server, timeout=0.3).complete("code", "m", MSG)
    assert out.text == "on time" and out.retries == 1


def test_retries_exhausted_raise_call_failed_with_count(server):
    server.push(*[Fail(500)] * 3)
    with pytest.raises(CallFailed) as info:
        client(server, retries=2).complete("code", "m", MSG)
    assert info.value.retries == 2 and "gave up after 2 retries" in str(info.value)
    assert "HTTP 500" in str(info.value)


def test_client_errors_are_not_retried(server):
    server.push(Fail(401, "bad key"), Reply("never"))
    with pytest.raises(CallFailed) as info:
        client(server).complete("code", "m", MSG)
    assert info.value.retries == 0 and "HTTP 401" in str(info.value) and "API key" in str(info.value)
    assert len(server.chat_requests()) == 1


def test_retry_after_is_honoured(server):
    sleeps: list[float] = []
    c = client(server, sleeps=sleeps)
    c.backoff = Backoff(base_s=0.001, max_s=5.0)
    server.push(Fail(429, headers={"Retry-After": "2"}), Reply("ok"))
    assert c.complete("code", "m", MSG).text == "ok"
    assert sleeps and sleeps[0] >= 2.0


def test_backoff_grows_exponentially_with_jitter():
    b, rng = Backoff(base_s=1.0, max_s=30.0), random.Random(1)
    delays = [b.delay(k, rng) for k in range(7)]
    for k, d in enumerate(delays):
        cap = min(30.0, 2.0 ** k)
        assert cap / 2 <= d <= cap
    assert len({round(d, 6) for d in delays}) == len(delays)  # jittered, not a fixed ladder


def test_key_is_sent_as_bearer_and_never_in_errors(server):
    secret = "sk-test-THIS-MUST-NOT-LEAK-1234"
    server.push(Reply("ok"), Fail(500, f"echo {secret}"), Fail(500, f"echo {secret}"))
    c = client(server, key_env="FAKE_KEY", environ={"FAKE_KEY": secret}, retries=1)
    c.complete("code", "m", MSG)
    assert header(server.chat_requests()[0], "authorization") == f"Bearer {secret}"
    with pytest.raises(CallFailed) as info:
        c.complete("code", "m", MSG)
    assert secret not in str(info.value)


def test_local_server_gets_no_real_key_and_model_is_discovered():
    with FakeLLMServer(models=("served-model", "other")) as s:
        s.push(Reply("ok"))
        out = client(s, model=None).complete("code", None, MSG)
        assert out.model == "served-model"
        assert s.chat_requests()[0]["body"]["model"] == "served-model"
        assert header(s.chat_requests()[0], "authorization") == "Bearer no-key"


def test_missing_usage_is_estimated(server):
    server.push(Reply("x" * 400, usage=False))
    out = client(server).complete("code", "m", MSG)
    assert out.tokens_out == 100 and out.tokens_in == len("hello there") // 4


def test_openai_reasoning_parameters(server):
    server.push(Reply("ok"), Reply("ok"))
    c = client(server, max_tokens_param="max_completion_tokens",
               sampling=Sampling(temperature=0.3, reasoning_effort="high", max_output_tokens=123))
    c.complete("code", "m", MSG, json_mode=True)
    body = server.chat_requests()[0]["body"]
    assert body["max_completion_tokens"] == 123 and body["reasoning_effort"] == "high"
    assert "temperature" not in body and body["response_format"] == {"type": "json_object"}
    c2 = client(server, sampling=Sampling(temperature=0.3))
    c2.complete("code", "m", MSG)
    body = server.chat_requests()[1]["body"]
    assert body["temperature"] == 0.3 and "reasoning_effort" not in body and "response_format" not in body


def test_truncated_answer_reports_length(server):
    server.push(Reply("```python\ndef run(x):\n", finish_reason="length"))
    out = client(server).complete("code", "m", MSG)
    assert out.finish_reason == "length" and out.text.startswith("```python")
