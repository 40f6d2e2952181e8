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
