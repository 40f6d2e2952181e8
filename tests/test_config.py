"""Configuration precedence: defaults < TOML < environment < flags; bad input is one clear line."""

from __future__ import annotations

from pathlib import Path

import pytest

from ksearch.config import ConfigError, load_config


def test_precedence(tmp_path: Path) -> None:
    f = tmp_path / "run.toml"
    f.write_text('task = "rmsnorm"\nbudget = 50\nseed = 4\n[weights]\nexploration = 0.9\n[llm]\nmodel = "m1"\n')
    cfg = load_config(f, {"seed": 7}, environ={"KSEARCH_BUDGET": "60"})
    assert cfg.task == "rmsnorm"
    assert cfg.budget == 60  # environment over file
    assert cfg.seed == 7  # flag over file
    assert cfg.weights.exploration == 0.9
    assert cfg.llm.model == "m1"
    assert load_config(None, {}, environ={}).budget == 120


def test_errors(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="does not exist"):
        load_config(tmp_path / "missing.toml", environ={})
    bad = tmp_path / "bad.toml"
    bad.write_text("budget = [")
    with pytest.raises(ConfigError, match="not valid TOML"):
        load_config(bad, environ={})
    unknown = tmp_path / "u.toml"
    unknown.write_text("budgett = 3\n")
    with pytest.raises(ConfigError, match="unknown config key 'budgett'"):
        load_config(unknown, environ={})
    with pytest.raises(ConfigError, match="cannot read"):
        load_config(None, environ={"KSEARCH_BUDGET": "lots"})
    with pytest.raises(ConfigError, match="at least 1"):
        load_config(None, {"budget": 0}, environ={})


@pytest.mark.parametrize(("overrides", "env", "says"), [
    ({"wall_time_s": -5}, {}, r"--wall-time \(wall_time_s\) -5: must be above 0 \(seconds; leave it out"),
    ({"wall_time_s": 0}, {}, r"--wall-time \(wall_time_s\) 0: must be above 0"),
    ({"timeout_s": -1}, {}, r"--timeout \(timeout_s\) -1: must be above 0"),
    ({}, {"KSEARCH_MEMORY_LIMIT_GB": "-1"}, r"memory_limit_gb -1: must be above 0 \(GiB\)"),
    ({}, {"KSEARCH_STAGNATION_WINDOW": "0"}, r"stagnation_window 0: must be at least 1"),
    ({"llm": {"max_usd": -1}}, {}, r"--max-usd \(llm.max_usd\) -1: must be above 0"),
    ({}, {"KSEARCH_LLM_MAX_TOKENS_TOTAL": "0"}, r"llm.max_tokens_total 0: must be at least 1"),
    ({}, {"KSEARCH_LLM_TEMPERATURE": "-0.5"}, r"llm.temperature -0.5: must be at least 0$"),
])
def test_limits_below_their_floor_are_one_line_errors(overrides: dict, env: dict, says: str) -> None:
    with pytest.raises(ConfigError, match=says):
        load_config(None, overrides, environ=env)


def test_limits_at_their_floor_or_unset_are_taken() -> None:
    cfg = load_config(None, {"wall_time_s": 0.5, "timeout_s": 1, "llm": {"max_usd": 0.01}},
                      environ={"KSEARCH_STAGNATION_WINDOW": "1", "KSEARCH_LLM_TEMPERATURE": "0"})
    assert (cfg.wall_time_s, cfg.timeout_s, cfg.stagnation_window, cfg.llm.max_usd, cfg.llm.temperature) == (
        0.5, 1, 1, 0.01, 0)
    assert load_config(None, {}, environ={}).wall_time_s is None
