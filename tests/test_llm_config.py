"""Presets, keys, prices and caps: configuration that must fail early and clearly."""

from __future__ import annotations

import pytest

from ksearch.config import LLMConfig
from ksearch.errors import BudgetExhausted, LLMConfigError
from ksearch.policy.llm import PRESETS, make_policy
from ksearch.policy.llm.presets import resolve
from ksearch.policy.llm.pricing import Budget, load_prices


def test_hosted_presets_need_their_key_variable():
    for name in ("openai", "gemini", "anthropic"):
        var = PRESETS[name].api_key_env
        with pytest.raises(LLMConfigError) as info:
            make_policy(LLMConfig(preset=name), environ={})
        msg = str(info.value)
        assert f"${var}" in msg and "export" in msg and "\n" not in msg
        make_policy(LLMConfig(preset=name), environ={var: "k"})  # set: fine


def test_named_key_variable_and_its_value_never_in_message():
    with pytest.raises(LLMConfigError) as info:
        make_policy(LLMConfig(preset="openai", api_key_env="MY_KEY"), environ={"OPENAI_API_KEY": "sk-secret"})
    assert "$MY_KEY" in str(info.value) and "sk-secret" not in str(info.value)


def test_local_presets_need_no_key():
    for name in ("vllm", "ollama", "lmstudio", "llamacpp"):
        ep = resolve(LLMConfig(preset=name), environ={})
        assert ep.api_key_env is None and ep.model is None and ep.base_url.startswith("http://localhost")


def test_custom_base_url_never_gets_a_hosted_key_unless_named():
    ep = resolve(LLMConfig(preset="openai", base_url="http://127.0.0.1:9/v1"), environ={})
    assert ep.api_key_env is None and ep.model is None and ep.max_tokens_param == "max_tokens"
    ep = resolve(LLMConfig(preset="openai", base_url="http://proxy/v1", api_key_env="PROXY_KEY"),
                 environ={"PROXY_KEY": "x"})
    assert ep.api_key_env == "PROXY_KEY"


def test_reasoning_and_coding_models():
    ep = resolve(LLMConfig(preset="openai"), environ={"OPENAI_API_KEY": "k"})
    assert ep.model == "gpt-5" and ep.coder_model == "gpt-5"
    ep = resolve(LLMConfig(preset="openai", model="o3", coder_model="gpt-4.1"), environ={"OPENAI_API_KEY": "k"})
    assert (ep.model, ep.coder_model) == ("o3", "gpt-4.1")
    ep = resolve(LLMConfig(preset="vllm", model="qwen"), environ={})
    assert ep.coder_model == "qwen"


def test_unknown_preset_lists_the_known_ones():
    with pytest.raises(LLMConfigError, match="ollama"):
        make_policy(LLMConfig(preset="nope"), environ={})


def test_replay_needs_no_key():
    make_policy(LLMConfig(preset="openai"), replay=[], environ={})


def test_price_table_file_overrides_and_unknown_models_cost_zero(tmp_path, caplog):
    table = tmp_path / "prices.toml"
    table.write_text('[prices."my-model"]\ninput = 2.0\noutput = 8.0\n')
    prices = load_prices(table, environ={})
    assert prices["my-model"] == (2.0, 8.0) and "gpt-5" in prices
    b = Budget(prices=prices)
    assert b.cost("my-model", 1_000_000, 500_000) == pytest.approx(6.0)
    with caplog.at_level("WARNING", logger="ksearch.llm"):
        assert b.cost("mystery", 10**6, 10**6) == 0.0
    assert "mystery" in caplog.text and b.state()["unpriced_models"] == ["mystery"]
    (tmp_path / "p.json").write_text('{"m": {"input": 1}}')
    with pytest.raises(LLMConfigError, match="output"):
        load_prices(tmp_path / "p.json", environ={})


def test_price_table_from_environment(tmp_path):
    (tmp_path / "p.json").write_text('{"m": {"input": 1, "output": 3}}')
    assert load_prices(environ={"KSEARCH_LLM_PRICES": str(tmp_path / "p.json")})["m"] == (1.0, 3.0)


def test_caps_raise_budget_exhausted_once_reached():
    b = Budget(max_tokens=100)
    b.check()
    b.add(60, 40, 0.0)
    with pytest.raises(BudgetExhausted, match="token cap"):
        b.check()
    b = Budget(max_usd=0.01)
    b.add(1, 1, 0.02)
    with pytest.raises(BudgetExhausted, match="spending cap"):
        b.check()


def test_bad_numbers_are_config_errors():
    with pytest.raises(LLMConfigError, match=r"^llm.request_timeout_s 0: must be above 0 \(seconds"):
        make_policy(LLMConfig(preset="vllm", request_timeout_s=0), environ={})
    with pytest.raises(LLMConfigError, match="KSEARCH_LLM_BACKOFF_S"):
        make_policy(LLMConfig(preset="vllm"), environ={"KSEARCH_LLM_BACKOFF_S": "soon"})


def test_package_import_does_not_load_openai_or_jinja():
    import subprocess
    import sys

    code = "import sys, ksearch.policy.llm; print('openai' in sys.modules, 'jinja2' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["False", "False"]


def test_cli_presets_prices_and_ping(monkeypatch):
    import json

    from fake_llm_server import FakeLLMServer, Reply
    from typer.testing import CliRunner

    from ksearch.cli import app

    runner = CliRunner()
    out = runner.invoke(app, ["llm", "presets", "--json"])
    assert out.exit_code == 0 and {r["preset"] for r in json.loads(out.output)} >= {"openai", "ollama"}
    out = runner.invoke(app, ["llm", "prices", "--json"])
    assert out.exit_code == 0 and "gpt-5" in json.loads(out.output)
    with FakeLLMServer(models=("tiny",)) as server:
        server.push(Reply("pong", tokens_in=5, tokens_out=1))
        out = runner.invoke(app, ["llm", "ping", "--preset", "llamacpp", "--base-url", server.url, "--json"])
    assert out.exit_code == 0, out.output
    row = json.loads(out.output)
    assert row["model"] == "tiny" and row["answer"] == "pong" and row["tokens_in"] == 5
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    out = runner.invoke(app, ["llm", "ping", "--preset", "openai"])
    assert out.exit_code == 2 and "OPENAI_API_KEY" in out.output


def test_local_servers_are_free_without_a_warning(caplog):
    b = Budget(warn_unpriced=False)
    with caplog.at_level("WARNING", logger="ksearch.llm"):
        assert b.cost("local-model", 1000, 1000) == 0.0
    assert caplog.text == "" and b.state()["unpriced_models"] == ["local-model"]


@pytest.mark.parametrize(("value", "says"), [
    ("", r"\$LLM_KEY is empty: export LLM_KEY=\.\.\. with the key"),
    ("  \n", r"\$LLM_KEY is blank \(only whitespace\)"),
    ("sk-abcdef ghijkl", r"\$LLM_KEY is set, but its value holds a space inside it"),
    ("sk-abcdef\nghijkl", r"\$LLM_KEY is set, but its value holds a control character inside it"),
    ("sk-abcdef\u00a0ghijkl", r"\$LLM_KEY is set, but its value holds a non-ASCII character inside it"),
])
def test_a_key_variable_without_a_usable_key_is_refused_without_its_value(value: str, says: str) -> None:
    with pytest.raises(LLMConfigError, match=says) as info:
        make_policy(LLMConfig(preset="vllm", base_url="http://127.0.0.1:9/v1", api_key_env="LLM_KEY"),
                    environ={"LLM_KEY": value})
    msg = str(info.value)
    assert "\n" not in msg and (not value.strip() or value.strip()[:9] not in msg)


def test_an_unset_variable_named_for_another_server_says_so_not_the_default_preset() -> None:
    with pytest.raises(LLMConfigError) as info:
        resolve(LLMConfig(base_url="http://127.0.0.1:9/v1", api_key_env="LLM_KEY"), environ={})
    msg = str(info.value)
    assert msg.startswith("$LLM_KEY (api_key_env, --api-key-env) is unset: export LLM_KEY=") and "openai" not in msg


@pytest.mark.parametrize(("url", "says"), [
    ("localhost:8000", "pass http://localhost:8000/v1"),
    ("127.0.0.1:8000/v1", "pass http://127.0.0.1:8000/v1"),
    ("htp://127.0.0.1:8000/v1", "start it with http:// or https://"),
    ("http://127.0.0.1:80OO/v1", "give a host and, after a colon, a port number"),
    ("http:///v1", "give a host"),
])
def test_a_base_url_the_client_cannot_use_is_refused(url: str, says: str) -> None:
    with pytest.raises(LLMConfigError, match="is not the URL of an OpenAI-compatible endpoint") as info:
        resolve(LLMConfig(base_url=url), environ={})
    assert says in str(info.value)
    assert resolve(LLMConfig(base_url=url), environ={}, check_key=False).base_url == url  # a replay sends nothing


def test_a_base_url_pasted_with_whitespace_is_taken_without_it() -> None:
    assert resolve(LLMConfig(base_url=" http://127.0.0.1:8000/v1/\n"), environ={}).base_url == (
        "http://127.0.0.1:8000/v1/")


def _closed_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _run_refused(tmp_path, *args: str, env: dict[str, str] | None = None) -> str:
    """`ksearch run softmax --policy llm ARGS`, which must end with one line and exit 2, no run directory made."""
    from typer.testing import CliRunner

    from ksearch.cli import app

    runs = tmp_path / "runs"
    result = CliRunner().invoke(app, ["run", "softmax", "--backend", "mlx-cpu", "--policy", "llm", "--budget", "1",
                                      "--runs-dir", str(runs), "--quiet", *args], env=env)
    assert result.exit_code == 2, result.output
    assert not runs.exists() or not any(runs.iterdir())
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(" ".join(lines).split("error: ")) == 2 and "Traceback" not in result.output
    return " ".join(" ".join(lines).split())


def test_a_new_run_refuses_an_endpoint_nothing_answers_at_before_it_exists(tmp_path) -> None:
    import time

    from fake_llm_server import FakeLLMServer

    start = time.monotonic()
    out = _run_refused(tmp_path, "--base-url", f"http://127.0.0.1:{_closed_port()}/v1")
    assert "cannot reach the LLM endpoint" in out and "nothing listens there" in out and "ksearch llm ping" in out
    with FakeLLMServer() as server:  # plain HTTP, asked in TLS
        out = _run_refused(tmp_path, "--base-url", server.url.replace("http://", "https://"))
        assert not server.requests
    assert "a server that speaks plain HTTP takes an http:// base URL" in out
    assert time.monotonic() - start < 20  # said at once, not after the retries of a run


@pytest.mark.parametrize(("args", "toml", "says"), [
    (("--base-url", "localhost:8000"), "", "pass http://localhost:8000/v1"),
    ((), '[llm]\nbase_ulr = "http://127.0.0.1:8000/v1"\n', "unknown config key 'llm.base_ulr'"),
    ((), "[llm]\nmax_output_tokens = 0\n", "llm.max_output_tokens 0: must be at least 1"),
    ((), "[llm]\ncontext_tokens = -1\n", "llm.context_tokens -1: must be at least 512"),
    ((), '[llm]\ntemperature = "0.2"\n', 'llm.temperature is "0.2"; expected a number'),
    (("--api-key-env", "LLM_KEY"), "", "$LLM_KEY is set, but its value holds a space inside it"),
])
def test_run_refuses_llm_settings_in_one_line_before_the_run_exists(tmp_path, args, toml, says) -> None:
    config = tmp_path / "run.toml"
    config.write_text(toml)
    out = _run_refused(tmp_path, "--base-url", f"http://127.0.0.1:{_closed_port()}/v1", "--config", str(config),
                       *args, env={"LLM_KEY": "sk-abcdef ghijkl"})
    assert says in out and "ghijkl" not in out
