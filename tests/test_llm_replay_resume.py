"""A run killed with SIGKILL while it judges a candidate, resumed to its end, replays: the call the kill cut off
(recorded, but not yet committed with the loop state) was asked again by the resumed search, and the replay
answers with what the search used, not with the lost call."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import psutil
import pytest
from fake_llm_server import SOFTMAX_KERNELS, FakeLLMServer, KSearchScript
from typer.testing import CliRunner

from ksearch.cli import app
from ksearch.store import RunNotFound, RunReader, RunUnreadable

pytestmark = pytest.mark.slow

SRC = str(Path(__file__).resolve().parents[1] / "src")
SLEEPER = '''import time

import mlx.core as mx


def run(x):
    time.sleep(600)  # SLEEPER: still being judged when the search is killed
    xf = x.astype(mx.float32)
    e = mx.exp(xf - mx.max(xf, axis=-1, keepdims=True))
    return (e / mx.sum(e, axis=-1, keepdims=True)).astype(x.dtype)
'''


def invoke(*args: str) -> Any:
    result = CliRunner().invoke(app, list(args))
    if result.exception and not isinstance(result.exception, SystemExit):
        raise result.exception
    return result


def _sleeper_asked(runs: Path) -> Path | None:
    for d in runs.iterdir() if runs.is_dir() else []:
        try:
            with RunReader(d) as reader:
                if any("SLEEPER" in (c.response or "") for c in reader.calls(texts=True)):
                    return d
        except (RunNotFound, RunUnreadable):
            continue
    return None


def test_a_killed_then_resumed_run_replays(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KSEARCH_LLM_BACKOFF_S", "0.01")
    runs = tmp_path / "runs"
    script = KSearchScript([SOFTMAX_KERNELS["compiled"], SLEEPER, SOFTMAX_KERNELS["exp2"]])
    with FakeLLMServer(script) as server:
        env = {**os.environ, "PYTHONPATH": SRC}
        proc = subprocess.Popen([sys.executable, "-m", "ksearch.cli", "run", "softmax", "--backend", "mlx-cpu",
                                 "--policy", "llm", "--base-url", server.url, "--budget", "4", "--timeout", "300",
                                 "--runs-dir", str(runs), "--quiet"], env=env, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE)
        deadline = time.time() + 400
        run = None
        while time.time() < deadline and proc.poll() is None:
            run = _sleeper_asked(runs)
            if run is not None:
                break
            time.sleep(0.3)
        assert run is not None, proc.communicate(timeout=10)
        time.sleep(2.0)  # the sleeper is being judged: its call is recorded, the loop state not yet committed
        children = psutil.Process(proc.pid).children(recursive=True)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
        for child in psutil.wait_procs(children, timeout=15)[1]:
            child.kill()
        resumed = invoke("run", "--resume", str(run), "--runs-dir", str(runs), "--quiet")
        assert resumed.exit_code == 0, resumed.output
    with RunReader(run) as reader:
        resumes = reader.events("resume")
        sources = [c.source(run) for c in reader.candidates()]
        statuses = [e.status for e in reader.evaluations("search")]
    assert len(resumes) == 1 and resumes[0].data["calls_recorded"] == resumes[0].data["calls_committed"] + 1
    assert not any("SLEEPER" in s for s in sources)  # its evaluation was lost with the killed process

    listing = json.loads(invoke("report", str(run), "--calls", "--json").output)["calls"]
    lost = [c for c in listing if c["lost"]]
    assert len(lost) == 1 and "SLEEPER" in lost[0]["response"]

    replays = tmp_path / "replays"
    replayed = invoke("run", "--replay", str(run), "--runs-dir", str(replays), "--quiet")
    assert replayed.exit_code == 0, replayed.output
    new = next(d for d in replays.iterdir() if (d / "run.db").is_file())
    with RunReader(new) as reader:
        assert [c.source(new) for c in reader.candidates()] == sources
        assert [e.status for e in reader.evaluations("search")] == statuses
        calls = [(c.role, c.response) for c in reader.calls(texts=True)]
    assert calls == [(c["role"], c["response"]) for c in listing if not c["lost"]]
