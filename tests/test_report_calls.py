"""`ksearch report RUN --calls`: every LLM call's figures, error, prompt and answer in full; `--json` for scripts;
calls lost to a kill marked; keys redacted even in a run recorded before redaction existed."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest
from typer.testing import CliRunner

from ksearch.cli import app
from ksearch.store import RunStore
from ksearch.store.redact import MASK, Redactor

OLD_KEY = "sk-recorded-before-redaction-5e6f7a8b9c0d"
LONG_PROMPT = "[system]\nYou write kernels.\n\n[user]\n# Code: first\n" + "".join(f"line {i}\n" for i in range(3000))


def call(role: str, prompt: str, response: str, error: str | None = None, retries: int = 0) -> SimpleNamespace:
    return SimpleNamespace(role=role, model="fake-model", prompt=prompt, response=response, tokens_in=1234,
                           tokens_out=56, latency_s=1.5, cost_usd=0.0021, retries=retries, error=error)


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("runs") / "20261201-120000-softmax-calls1"
    # An empty redactor: the run holds the key as an older ksearch would have written it.
    store = RunStore(path, create=True, redactor=Redactor())
    store.set_meta("config", {"llm": {"api_key_env": "OLD_RUN_KEY"}})
    store.add_call(0, call("analysis", "[user]\n# Analysis", f"reduction; echoed Bearer {OLD_KEY}"))
    store.add_call(0, call("code", LONG_PROMPT, "```python\ndef run(x):\n    return x\n```"))
    store.add_call(0, call("code", LONG_PROMPT, "", error="code: HTTP 503: overloaded; gave up after 3 retries",
                           retries=3))
    # The process was killed after the third call was recorded; the resumed search had used two.
    store.add_event(0, "resume", {"evaluations_done": 1, "calls_recorded": 3, "calls_committed": 2})
    store.add_call(0, call("code", LONG_PROMPT, "```python\ndef run(x):\n    return x * 1\n```"))
    store.close()
    return path


def invoke(*args: str, env: dict[str, str] | None = None) -> tuple[int, str]:
    r = CliRunner().invoke(app, list(args), env={"COLUMNS": "100", **(env or {})})
    return r.exit_code, r.output


def test_calls_show_every_figure_and_both_texts_in_full(run: Path) -> None:
    code, out = invoke("report", str(run), "--calls")
    assert code == 0, out
    assert f"{run.name}: 4 LLM calls" in out
    assert "call 1/4 · round 0 · analysis · fake-model · 1,234 in / 56 out tokens · 1.50 s · 0 retries · $0.0021" in out
    assert "3 retries" in out and "error: code: HTTP 503: overloaded; gave up after 3 retries" in out
    assert "line 0\n" in out and "line 2999\n" in out  # nothing cut, every line as it was (no wrapping)
    assert "# Analysis" in out and "return x * 1" in out and "(none)" in out
    assert out.count("lost: a kill cut the search off") == 1


def test_calls_as_json(run: Path) -> None:
    code, out = invoke("report", str(run), "--calls", "--json")
    assert code == 0, out
    doc = json.loads(out)
    assert doc["run"] == run.name and [c["index"] for c in doc["calls"]] == [1, 2, 3, 4]
    first = doc["calls"][0]
    assert set(first) == {"index", "id", "created_at", "round", "role", "model", "tokens_in", "tokens_out",
                          "latency_s", "retries", "cost_usd", "error", "lost", "prompt", "response"}
    assert doc["calls"][1]["prompt"] == LONG_PROMPT
    assert [c["lost"] for c in doc["calls"]] == [False, False, True, False]


def test_keys_of_the_run_are_redacted_when_the_reader_has_them(run: Path) -> None:
    for args in (("--calls",), ("--calls", "--json")):
        code, out = invoke("report", str(run), *args, env={"OLD_RUN_KEY": OLD_KEY})
        assert code == 0 and OLD_KEY not in out and f"Bearer {MASK}" in out


def test_bad_combinations_are_one_line_errors(run: Path) -> None:
    code, out = invoke("report", str(run), "--json")
    assert code == 2 and "--json goes with --evaluations or --calls" in out
    code, out = invoke("report", str(run), "--calls", "--evaluations")
    assert code == 2 and "--calls shows the transcripts alone" in out


def test_an_offline_run_has_no_calls(tmp_path: Path) -> None:
    path = tmp_path / "20261201-120000-softmax-offline"
    RunStore(path, create=True).close()
    code, out = invoke("report", str(path), "--calls")
    assert code == 0 and "no LLM calls" in out
    code, out = invoke("report", str(path), "--calls", "--json")
    assert code == 0 and json.loads(out)["calls"] == []
