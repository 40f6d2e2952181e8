"""Configuration precedence: defaults < TOML < environment < flags; bad input is one clear line."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from ksearch.cli import app
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
    with pytest.raises(ConfigError, match='environment: KSEARCH_BUDGET is "lots"; expected a whole number'):
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
    ({"llm": {"temperature": 2.5}}, {}, r"llm.temperature 2.5: must be at most 2 \(the range"),
    ({"llm": {"max_output_tokens": 0}}, {}, r"llm.max_output_tokens 0: must be at least 1 \(tokens\)"),
    ({}, {"KSEARCH_LLM_CONTEXT_TOKENS": "-5"}, r"llm.context_tokens -5: must be at least 512 \(.*leave it out to ask"),
    ({}, {"KSEARCH_LLM_CONTEXT_TOKENS": "0"}, r"llm.context_tokens 0: must be at least 512"),
    ({"llm": {"request_timeout_s": 0}}, {}, r"llm.request_timeout_s 0: must be above 0 \(seconds"),
    ({"llm": {"max_retries": -1}}, {}, r"llm.max_retries -1: must be at least 0"),
    ({"llm": {"max_answer_kb": 0}}, {}, r"llm.max_answer_kb 0: must be at least 1 \(KB\)"),
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


@pytest.mark.parametrize(("toml", "says"), [
    ("weights = 5", r"weights is 5; expected a table of settings \(\[weights\] on a line of its own"),
    ("llm = 5", r"llm is 5; expected a table of settings \(\[llm\]"),
    ('llm = "openai"', r'llm is "openai"; expected a table'),
    ("budget = 3.5", "budget is 3.5; expected a whole number"),
    ("budget = 3.0", "budget is 3.0; expected a whole number"),
    ("budget = true", "budget is true; expected a whole number"),
    ('budget = "30"', 'budget is "30"; expected a whole number'),
    ("budget = [1, 2]", "budget is an array; expected a whole number"),
    ("wall_time_s = false", "wall_time_s is false; expected a number"),
    ("task = 5", "task is 5; expected a string"),
    ("[task]\nname = 1", "task is a table; expected a string"),
    ("[weights]\nscore = true", "weights.score is true; expected a number"),
    ("[weights]\nrule = [\"weighted\"]", "weights.rule is an array; expected a string"),
    ("[llm]\nstructured_output = 1", "llm.structured_output is 1; expected true or false"),
    ("[llm]\nmax_output_tokens = 8192.5", "llm.max_output_tokens is 8192.5; expected a whole number"),
])
def test_a_value_of_the_wrong_type_in_the_file_is_refused(tmp_path: Path, toml: str, says: str) -> None:
    f = tmp_path / "run.toml"
    f.write_text(toml + "\n")
    with pytest.raises(ConfigError, match=f"^{f}: {says}"):
        load_config(f, environ={})


@pytest.mark.parametrize(("env", "says"), [
    ({"KSEARCH_BUDGET": "3.5"}, 'KSEARCH_BUDGET is "3.5"; expected a whole number'),
    ({"KSEARCH_BUDGET": "true"}, 'KSEARCH_BUDGET is "true"; expected a whole number'),
    ({"KSEARCH_LLM_TEMPERATURE": "hot"}, 'KSEARCH_LLM_TEMPERATURE is "hot"; expected a number'),
    ({"KSEARCH_LLM_STRUCTURED_OUTPUT": "maybe"}, 'KSEARCH_LLM_STRUCTURED_OUTPUT is "maybe"; expected true or false'),
])
def test_environment_text_that_does_not_read_as_its_type_is_refused(env: dict, says: str) -> None:
    with pytest.raises(ConfigError, match=f"^environment: {says}$"):
        load_config(None, environ=env)


def test_values_of_their_own_type_are_taken(tmp_path: Path) -> None:
    f = tmp_path / "run.toml"
    f.write_text("timeout_s = 30\nbudget = 7\n[llm]\ntemperature = 1\nstructured_output = false\n")
    cfg = load_config(f, environ={"KSEARCH_SEED": " 3 ", "KSEARCH_LLM_STRUCTURED_OUTPUT": "yes",
                                  "KSEARCH_MEMORY_LIMIT_GB": "2.5"})
    assert (cfg.timeout_s, cfg.budget, cfg.llm.temperature, cfg.seed, cfg.memory_limit_gb) == (30.0, 7, 1.0, 3, 2.5)
    assert isinstance(cfg.timeout_s, float) and cfg.llm.structured_output is True
    assert load_config(None, environ={"KSEARCH_LLM_STRUCTURED_OUTPUT": "off"}).llm.structured_output is False


def test_a_new_runs_task_comes_from_the_flag_the_environment_or_the_file(tmp_path: Path) -> None:
    f = tmp_path / "run.toml"
    f.write_text('task = "rmsnorm"\n')
    assert load_config(f, environ={}, need_task=True).task == "rmsnorm"
    assert load_config(f, environ={"KSEARCH_TASK": "softmax"}, need_task=True).task == "softmax"
    assert load_config(f, {"task": "layernorm"}, environ={"KSEARCH_TASK": "softmax"}, need_task=True).task == (
        "layernorm")
    with pytest.raises(ConfigError, match="name a task"):
        load_config(None, environ={}, need_task=True)


@pytest.mark.parametrize(("args", "env", "named"), [
    (["--config", "{f}"], {"KSEARCH_TASK": None}, "from_file"),
    (["--config", "{f}"], {"KSEARCH_TASK": "from_env"}, "from_env"),
    (["from_flag", "--config", "{f}"], {"KSEARCH_TASK": "from_env"}, "from_flag"),
])
def test_ksearch_run_takes_its_task_from_the_config_file_or_environment(tmp_path: Path, args: list[str], env: dict,
                                                                        named: str) -> None:
    f = tmp_path / "run.toml"
    f.write_text('task = "from_file"\n')
    runs = tmp_path / "runs"
    # an unknown task name is refused before the run exists: the name in the error is the one the run took
    res = CliRunner().invoke(app, ["run", *(a.format(f=f) for a in args), "--runs-dir", str(runs), "--quiet"],
                             env=env)
    assert res.exit_code == 2, res.output
    assert f"unknown task '{named}'" in res.output
    assert not runs.exists()


def test_a_table_key_given_a_number_is_one_line_from_ksearch_run(tmp_path: Path) -> None:
    f = tmp_path / "run.toml"
    f.write_text('task = "softmax"\nweights = 5\n')
    res = subprocess.run([sys.executable, "-m", "ksearch.cli", "run", "--config", str(f), "--runs-dir",
                          str(tmp_path / "runs"), "--quiet"], capture_output=True, text=True, timeout=120)
    assert res.returncode == 2, res.stderr
    assert res.stderr.strip().splitlines() == [f"error: {f}: weights is 5; expected a table of settings ([weights] "
                                               "on a line of its own, its keys below it)"]
    assert not (tmp_path / "runs").exists()
