"""Bad input gets one line that says what to do, and exit code 2."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

KS = [sys.executable, "-m", "ksearch.cli"]
A_FOLDER = str(Path(__file__).parent)


@pytest.mark.parametrize("args,needle", [
    (["eval", "softmax", "x.py", "--bogus"], "No such option: --bogus"),
    (["eval"], "Missing argument"),
    (["eval", "softmax", "x.py", "--timeout", "abc"], "--timeout"),
    (["eval", "nope", "x.py"], "unknown task 'nope'"),
    (["run", "softmax", "--budget", "0"], "budget must be at least 1"),
    (["run", "softmax", "--strategy", "sideways"], "unknown strategy 'sideways'"),
    (["run", "softmax", "--backend", "mlx-tpu"], "unknown backend 'mlx-tpu'"),
    (["run"], "name a task"),
    (["run", "softmax", "--reevaluate"], "--reevaluate goes with --replay RUN"),
    (["run", "softmax", "--stop-after", "0"], "--stop-after 0: pause after 1 or more evaluations"),
    (["run", "softmax", "--config", A_FOLDER], f"config file {A_FOLDER} is a directory; pass a TOML file"),
    (["eval", "softmax", A_FOLDER], f"candidate file {A_FOLDER} is a directory; name a file"),
    (["port", __file__], "is not CUDA source"),
    (["run", "softmax", "--from-cuda", __file__], "is not CUDA source: name a .cu, .cuh or .cuda file"),
    (["run", "softmax", "--from-cuda", A_FOLDER], f"--from-cuda file {A_FOLDER} is a directory; name a file"),
    (["run", A_FOLDER], f"task file {A_FOLDER} is a directory"),
])
def test_one_line_errors(args: list[str], needle: str, tmp_path) -> None:
    res = subprocess.run([*KS, *args, *(["--runs-dir", str(tmp_path)] if args[0] == "run" else [])],
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 2, (res.stdout, res.stderr)
    lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, res.stderr
    assert needle in lines[0]
    assert not list(tmp_path.iterdir()), "a refused run must not leave a run directory"


def test_bare_command_prints_help() -> None:
    res = subprocess.run(KS, capture_output=True, text=True, timeout=60)
    assert res.returncode == 0
    assert "Usage" in res.stdout
