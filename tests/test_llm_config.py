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
    with pytest.raises(LLMConfigError):
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
