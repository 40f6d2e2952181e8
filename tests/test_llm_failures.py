"""Failures are visible: a run whose proposer keeps failing ends `failed` with a one-line reason and exit 1; every
end states its reason in the CLI, `ksearch runs` and the report; retries are counted and shown; a run whose
process is gone is `interrupted`, not `running`; the offline world model standing in for the model's is said."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import psutil
import pytest

pytest.importorskip("ksearch.search.loop")

from fake_llm_server import Fail, FakeLLMServer, KSearchScript, Reply, heading  # noqa: E402
from typer.testing import CliRunner  # noqa: E402

from ksearch.cli import app  # noqa: E402
from ksearch.report.rundata import load_run  # noqa: E402
from ksearch.report.summary import headline  # noqa: E402
from ksearch.store import list_runs, read_run  # noqa: E402
from ksearch.store.db import RunStore  # noqa: E402
from ksearch.store.owner import current_owner, effective_status, owner_liveness  # noqa: E402

pytestmark = pytest.mark.slow


def invoke(*args: str) -> Any:
    result = CliRunner().invoke(app, list(args))
    if result.exception and not isinstance(result.exception, SystemExit):
        raise result.exception
    return result


def llm_run(server: FakeLLMServer, runs: Path, *extra: str, budget: int = 6) -> Any:
    return invoke("run", "softmax", "--backend", "mlx-cpu", "--policy", "llm", "--preset", "vllm", "--base-url",
                  server.url, "--model", "fake-model", "--budget", str(budget), "--runs-dir", str(runs), "--quiet",
                  *extra)


def only_run(runs: Path) -> Path:
    found = [d for d in runs.iterdir() if (d / "run.db").is_file()]
    assert len(found) == 1, found
    return found[0]


def runs_row(runs: Path, run: Path) -> dict[str, str]:
    """The run's row of `ksearch runs` as a user sees it (wide enough that no cell wraps), by column."""
    out = subprocess.run([sys.executable, "-m", "ksearch.cli", "runs", "--runs-dir", str(runs)], capture_output=True,
                         text=True, timeout=120, env={**os.environ, "COLUMNS": "250"})
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    head = next(line for line in lines if "reason" in line)
    row = next(line for line in lines if run.name in line)
    cells = [c.strip() for c in row.split("│")[1:-1]]
    return dict(zip([c.strip() for c in head.split("┃")[1:-1]], cells, strict=True))


@pytest.fixture
def quick_retries(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KSEARCH_LLM_BACKOFF_S", "0.01")
    monkeypatch.setenv("KSEARCH_LLM_MAX_RETRIES", "1")


def test_an_endpoint_refusing_every_prompt_fails_the_run_with_exit_1(tmp_path, quick_retries):
    # llama.cpp with too small a context answers 400 to every prompt; so does a wrong model name.
    with FakeLLMServer(lambda _body: Fail(400, "the request is malformed")) as server:
        result = llm_run(server, tmp_path / "runs", budget=8)
    assert result.exit_code == 1, result.output
    run = only_run(tmp_path / "runs")
    text = " ".join(result.output.split())
    assert f"run {run.name} failed: endpoint failure: 5 proposer calls in a row failed" in text
    assert "HTTP 400" in text
    recs = read_run(run)
    assert recs.meta.status == "failed" and recs.meta.stop_kind == "endpoint_failure"
    assert recs.meta.evaluations_done == 1  # the starting kernel; then the code calls failed too
    # Analysis, init, the frontier refresh (the offline tree standing in has two actions), two code calls: not one
    # more after the fifth error.
    assert [c.role for c in recs.calls] == ["analysis", "init", "edit", "code", "code"]
    assert [e.kind for e in recs.events if e.kind == "proposer_failed"] == ["proposer_failed"]
    end = [e for e in recs.events if e.kind == "run_end"]
    assert len(end) == 1 and end[0].data == {"status": "failed", "kind": "endpoint_failure",
                                             "reason": recs.meta.stop_reason}
    # The offline world model stood in for the model's, and says so.
    fallback = [e for e in recs.events if e.kind == "world_model_fallback"]
    assert len(fallback) == 1 and "the proposer's call failed" in fallback[0].data["message"]
    facts = dict(headline(load_run(run)))
    assert facts["status"].startswith("failed: endpoint failure: 5 proposer calls in a row failed")
    assert facts["world model"].startswith("the offline world model stands in")
    assert facts["proposer errors"] == "5"
    assert "5 calls (0 retries, 5 failed)" in facts["LLM spend"]
    row = runs_row(tmp_path / "runs", run)
    assert (row["status"], row["reason"], row["retries"]) == ("failed", "endpoint failure", "0")
    # A failed run is not finished: it resumes (the endpoint may be fixed by then) and fails again when it is not.
    with FakeLLMServer(lambda _body: Fail(400, "still malformed")) as server:
        again = invoke("run", "--resume", run.name, "--runs-dir", str(tmp_path / "runs"), "--quiet")
    assert again.exit_code == 1, again.output
    assert read_run(run).meta.status == "failed"


def test_the_limit_of_errors_in_a_row_is_a_setting_and_unusable_answers_count(tmp_path, quick_retries):
    config = tmp_path / "run.toml"
    config.write_text("max_consecutive_errors = 2\n")
    # Answers arrive, but none is usable (no JSON, no code), not even after the repair round.
    with FakeLLMServer(lambda _body: Reply("")) as server:
        result = llm_run(server, tmp_path / "runs", "--config", str(config))
    assert result.exit_code == 1, result.output
    meta = read_run(only_run(tmp_path / "runs")).meta
    assert meta.status == "failed" and meta.stop_kind == "proposer_failure"
    assert "proposer failure: 2 proposer errors in a row (last: init: unusable answer" in (meta.stop_reason or "")
    bad = tmp_path / "bad.toml"
    bad.write_text("max_consecutive_errors = 0\n")
    refused = invoke("run", "softmax", "--config", str(bad), "--runs-dir", str(tmp_path / "none"))
    assert refused.exit_code == 2 and "max_consecutive_errors must be at least 1" in refused.output


def test_errors_that_do_not_follow_each_other_do_not_fail_the_run(tmp_path, quick_retries):
    script = KSearchScript()
    code_calls = [0]

    def every_other_code_call_fails(body: dict[str, Any]) -> Any:
        if heading(body).startswith("# Code"):
            code_calls[0] += 1
            if code_calls[0] % 2:
                return Fail(400, "try again")
        return script(body)

    config = tmp_path / "run.toml"
    config.write_text("max_consecutive_errors = 2\n")
    with FakeLLMServer(every_other_code_call_fails) as server:
        result = llm_run(server, tmp_path / "runs", "--config", str(config), budget=3)
    assert result.exit_code == 0, result.output
    recs = read_run(only_run(tmp_path / "runs"))
    assert recs.meta.status == "finished" and recs.meta.stop_kind == "budget"
    assert len([e for e in recs.events if e.kind == "policy_error"]) >= 2
    text = " ".join(result.output.split())
    assert "finished: the budget of 3 evaluations is spent" in text


def test_retries_are_counted_and_shown(tmp_path, quick_retries):
    script = KSearchScript(faults=[("# Analysis", Fail(503)), ("# World model: initial", Fail(429))])
    with FakeLLMServer(script) as server:
        result = llm_run(server, tmp_path / "runs", budget=2)
    assert result.exit_code == 0, result.output
    run = only_run(tmp_path / "runs")
    recs = read_run(run)
    assert recs.meta.llm_usage["retries"] == 2 == sum(c.retries or 0 for c in recs.calls)
    assert "2 retries" in " ".join(result.output.split())  # the final table's LLM line
    facts = dict(headline(load_run(run)))
    assert "(2 retries)" in facts["LLM spend"]
    assert facts["world model"] == "written by the proposer"
    assert not [e for e in recs.events if e.kind == "world_model_fallback"]
    row = runs_row(tmp_path / "runs", run)
    assert (row["status"], row["reason"], row["retries"]) == ("finished", "budget", "2")


def test_report_and_html_state_the_end(tmp_path, quick_retries):
    with FakeLLMServer(lambda _body: Fail(400, "no")) as server:
        llm_run(server, tmp_path / "runs")
    run = only_run(tmp_path / "runs")
    out = invoke("report", str(run), "--html", str(tmp_path / "r.html"), "--no-tree")
    assert out.exit_code == 0, out.output
    text = " ".join(out.output.replace("│", " ").split())  # the panel's border cuts wrapped lines
    assert "failed: endpoint failure: 5 proposer calls in a row failed" in text
    assert "world model the offline world model stands in" in text
    html = (tmp_path / "r.html").read_text()
    assert "failed: endpoint failure" in html and "offline world model stands in" in html
    assert "<th>retries</th>" in html


def test_offline_runs_state_their_end_too(tmp_path):
    result = invoke("run", "softmax", "--backend", "mlx-cpu", "--budget", "2", "--runs-dir", str(tmp_path),
                    "--quiet")
    assert result.exit_code == 0, result.output
    assert "finished: the budget of 2 evaluations is spent" in " ".join(result.output.split())
    paused = invoke("run", "softmax", "--backend", "mlx-cpu", "--budget", "3", "--stop-after", "1", "--runs-dir",
                    str(tmp_path / "p"), "--quiet")
    assert paused.exit_code == 0
    assert "stopped: paused after 1 evaluation (--stop-after)" in " ".join(paused.output.split())
    # the command that continues it, as pasted in any folder
    run = next((tmp_path / "p").iterdir()).resolve()
    assert f"--resume continues it (`ksearch run --resume {run}`)" in " ".join(paused.output.split())
    rows = {r["id"]: r for r in list_runs(tmp_path)} | {r["id"]: r for r in list_runs(tmp_path / "p")}
    assert sorted(r["stop_kind"] for r in rows.values()) == ["budget", "paused"]


# -- a run whose process is gone --------------------------------------------------------------------------------


def _dead_process() -> dict[str, Any]:
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(0.2)"])
    owner = {"pid": proc.pid, "host": current_owner()["host"], "started": psutil.Process(proc.pid).create_time()}
    proc.wait()
    return owner


def test_liveness_of_a_runs_owner():
    me = current_owner()
    assert owner_liveness(me) == "alive"
    assert owner_liveness(_dead_process()) == "gone"
    assert owner_liveness({**me, "started": me["started"] - 1000}) == "gone"  # a pid reused by a later process
    assert owner_liveness({**me, "host": "elsewhere"}) == "unknown"
    assert owner_liveness(None) == "unknown"
    assert effective_status({"status": "running", "owner": _dead_process()}) == "interrupted"
    assert effective_status({"status": "holdout", "owner": me}) == "holdout"
    assert effective_status({"status": "finished", "owner": _dead_process()}) == "finished"
    # Runs written before the owner record: the bare pid decides.
    assert effective_status({"status": "running", "pid": _dead_process()["pid"]}) == "interrupted"


def test_a_running_run_whose_process_is_gone_reads_interrupted_and_resumes(tmp_path):
    # A budget of 2: the resumed run has one evaluation left to do before its holdout.
    result = invoke("run", "softmax", "--backend", "mlx-cpu", "--budget", "2", "--stop-after", "1", "--runs-dir",
                    str(tmp_path), "--quiet")
    assert result.exit_code == 0, result.output
    run = only_run(tmp_path)
    store = RunStore(run)
    store.set_meta("status", "running")  # what a SIGKILL leaves behind
    store.set_meta("owner", _dead_process())
    store.close()
    [row] = list_runs(tmp_path)
    assert row["status"] == "interrupted" and row["stop_kind"] == "interrupted"
    assert "ended without a word" in row["stop_reason"]
    facts = dict(headline(load_run(run)))
    assert facts["status"].startswith("interrupted: its search process (pid ")
    resumed = invoke("run", "--resume", run.name, "--runs-dir", str(tmp_path), "--quiet")
    assert resumed.exit_code == 0, resumed.output
    meta = read_run(run).meta
    assert meta.status == "finished" and meta.get("owner")["pid"] == os.getpid()  # the resumed run's owner


def test_resuming_a_run_whose_process_is_alive_is_refused(tmp_path):
    result = invoke("run", "softmax", "--backend", "mlx-cpu", "--budget", "3", "--stop-after", "1", "--runs-dir",
                    str(tmp_path), "--quiet")
    assert result.exit_code == 0
    run = only_run(tmp_path)
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        time.sleep(0.2)
        store = RunStore(run)
        store.set_meta("status", "running")
        store.set_meta("owner", {"pid": sleeper.pid, "host": current_owner()["host"],
                                 "started": psutil.Process(sleeper.pid).create_time()})
        store.close()
        assert list_runs(tmp_path)[0]["status"] == "running"
        refused = invoke("run", "--resume", run.name, "--runs-dir", str(tmp_path), "--quiet")
        assert refused.exit_code == 2
        assert f"run {run.name} is still running (pid {sleeper.pid}" in " ".join(refused.output.split())
    finally:
        sleeper.kill()
        sleeper.wait()
    assert list_runs(tmp_path)[0]["status"] == "interrupted"
