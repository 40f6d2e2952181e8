"""Paths and messages with [brackets] are printed as text by every command: rich reads "[/...]" as a closing tag, so a
run directory such as `runs[/x]` taken as markup ended a finished run, or a report of it, with a traceback."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from test_report_fakerun import make_fake_run

KS = [sys.executable, "-m", "ksearch.cli"]
ENV = {**os.environ, "COLUMNS": "200"}


def ks(*args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*KS, *args], capture_output=True, text=True, timeout=timeout, env=ENV,
                          stdin=subprocess.DEVNULL)


def test_a_search_in_a_bracketed_runs_directory_ends_cleanly(tmp_path: Path) -> None:
    runs = tmp_path / "runs[/x]"
    done = ks("run", "softmax", "--budget", "1", "--runs-dir", str(runs), "--confirm-top", "0")
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"{runs}/" in done.stdout and "Traceback" not in done.stderr


def test_report_compare_export_and_runs_print_a_bracketed_path_as_it_is(tmp_path: Path) -> None:
    base = tmp_path / "runs[/x]"
    base.mkdir(parents=True)
    run = make_fake_run(base)
    printed = {}
    for args in (("report", str(run), "--no-tree"), ("compare", str(run), str(run), "--out", str(base / "c.svg")),
                 ("export", str(run), "--out", str(base / "k.py")), ("runs", "--runs-dir", str(base))):
        done = ks(*args)
        assert done.returncode == 0, (args, done.stdout, done.stderr)
        assert "Traceback" not in done.stderr, (args, done.stderr)
        printed[args[0]] = done.stdout
    assert f"written: {base / 'c.svg'}" in printed["compare"] and f"to {base / 'k.py'}" in printed["export"]
    assert str(run) in printed["compare"].replace("\n", "")
