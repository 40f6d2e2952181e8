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


def test_a_key_read_from_a_file_is_sent_without_its_line_end(server):
    secret = "sk-test-FROM-A-KEYFILE-5678"
    server.push(Reply("ok"))
    client(server, key_env="FAKE_KEY", environ={"FAKE_KEY": secret + "\r\n"}, retries=0).complete("code", "m", MSG)
    assert header(server.chat_requests()[0], "authorization") == f"Bearer {secret}"


def test_a_body_that_is_not_json_is_quoted_not_parsed(server):
    server.push(Garbage("<html><body>502 Bad Gateway (nginx)</body></html>"))
    with pytest.raises(CallFailed) as info:
        client(server, retries=0).complete("code", "m", MSG)
    msg = str(info.value)
    assert "malformed response (not JSON (JSONDecodeError: " in msg
    assert "it begins '<html><body>502 Bad Gateway (nginx)</body></html>'" in msg


def test_an_endpoint_nothing_answers_at_is_told_with_what_to_do(server):
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        closed = f"http://127.0.0.1:{s.getsockname()[1]}/v1"
    assert client_at(server.url).unreachable(2.0) is None
    assert "Connection refused; nothing listens there: start the server" in (client_at(closed).unreachable(2.0) or "")
    tls = client_at(server.url.replace("http:", "https:")).unreachable(2.0)
    assert "a server that speaks plain HTTP takes an http:// base URL" in (tls or "")
    with pytest.raises(CallFailed, match="nothing listens there"):  # the same words in a run's calls
        client_at(closed).complete("code", "m", MSG)


def client_at(url: str) -> ChatClient:
    return ChatClient(Endpoint("test", url, None, "m", "m", "max_tokens"), Sampling(), timeout_s=2.0, max_retries=0,
                      environ={})
