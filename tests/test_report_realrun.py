"""The views on a real search: `ksearch run` on CPU in one process, `ksearch watch` following it from another,
then report, HTML, compare and export on what it left behind.

One small run (budget 3) serves every test in this module, to keep the CPU suite fast.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from test_report_fakerun import make_fake_run

from ksearch.report.rundata import load_run, wm_nodes

# Its module fixture (a real run) is made once: the module stays in one pytest-xdist worker.
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("report_realrun")]

BUDGET = 3


def ksearch(*args: str, timeout: float = 280) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "ksearch.cli", *args], capture_output=True, text=True,
                          timeout=timeout, env={**os.environ, "COLUMNS": "160"})


@pytest.fixture(scope="module")
def real_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    runs = tmp_path_factory.mktemp("runs")
    proc = subprocess.Popen(
        [sys.executable, "-m", "ksearch.cli", "run", "softmax", "--backend", "mlx-cpu", "--budget", str(BUDGET),
         "--runs-dir", str(runs), "--quiet", "--timeout", "60", "--seed", "0"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    try:
        deadline = time.time() + 120
        while not list(runs.glob("*/run.db")):
            assert proc.poll() is None, proc.communicate()
            assert time.time() < deadline, "ksearch run made no run directory"
            time.sleep(0.2)
        run_dir = next(runs.glob("*/run.db")).parent
        # Follow it from another process, as a person would from a second terminal.
        watched = ksearch("watch", str(run_dir), "--interval", "0.5", timeout=600)
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err[-3000:]
    assert watched.returncode == 0, watched.stderr[-3000:]
    return run_dir, watched.stdout


def test_watch_followed_to_the_end(real_run: tuple[Path, str]) -> None:
    run_dir, watched = real_run
    assert f"run {run_dir.name}: finished" in watched
    assert f"{BUDGET}/{BUDGET}" in watched


def test_report_on_a_real_run(real_run: tuple[Path, str], tmp_path: Path) -> None:
    from test_report_html import ARTIFACTS, render

    run_dir, _ = real_run
    run = load_run(run_dir)
    assert run.status == "finished" and len(run.attempts) == BUDGET
    r = ksearch("report", str(run_dir), "--html", str(tmp_path / "r.html"))
    assert r.returncode == 0, r.stderr
    assert run.best_candidate and run.best_candidate in r.stdout and "path to the best" in r.stdout
    dom, console = render(tmp_path / "r.html", tmp_path, "--dump-dom")
    assert console == []
    wm = run.world_model()
    assert wm is not None
    assert dom.count('class="wm-node ') == len(wm_nodes(wm))
    assert "<svg" in dom[dom.index('id="trajectory-chart"'):][:500]
    ARTIFACTS.mkdir(exist_ok=True)
    shot = ARTIFACTS / "report-real-run.png"
    shot.unlink(missing_ok=True)
    render(tmp_path / "r.html", tmp_path, "--window-size=1280,3000", f"--screenshot={shot}")
    assert shot.is_file()


def test_compare_real_and_fabricated(real_run: tuple[Path, str], tmp_path: Path) -> None:
    fake = make_fake_run(tmp_path, "fabricated")
    r = ksearch("compare", str(real_run[0]), str(fake), "--out", str(tmp_path / "c.svg"))
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "c.svg").read_text().lstrip().startswith("<?xml")


def test_export_of_a_real_run_passes_eval(real_run: tuple[Path, str], tmp_path: Path) -> None:
    run_dir, _ = real_run
    out = tmp_path / "best_kernel.py"
    r = ksearch("export", str(run_dir), "--out", str(out))
    assert r.returncode == 0, r.stderr
    assert run_dir.name in out.read_text().splitlines()[1]
    ev = ksearch("eval", "softmax", str(out), "--backend", "mlx-cpu", "--json")
    assert ev.returncode == 0, ev.stderr[-3000:]
    assert json.loads(ev.stdout.strip().splitlines()[-1])["status"] == "passed"
    fib = ksearch("export", str(run_dir), "--format", "flashinfer-trace", "--out", str(tmp_path / "fib"))
    assert fib.returncode == 0, fib.stderr
    assert list((tmp_path / "fib" / "traces").rglob("*.jsonl"))
