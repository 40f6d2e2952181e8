"""The benchmark commands write results in the one schema."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ksearch.bench.results import REQUIRED, validate

KS = [sys.executable, "-m", "ksearch.cli"]


def test_bench_naive_and_search_summary(tmp_path: Path) -> None:
    res = subprocess.run([*KS, "bench", "naive", "--backend", "mlx-cpu", "--tasks", "rmsnorm", "--out", str(tmp_path)],
                         capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr
    data = json.loads(next(tmp_path.glob("naive-*.json")).read_text())
    validate(data)
    assert all(k in data for k in REQUIRED)
    assert {f["task"] for f in data["figures"]} == {"rmsnorm"}
    assert data["summary"]["passed"] == ["rmsnorm"]
    runs = tmp_path / "runs"
    res = subprocess.run([*KS, "run", "rmsnorm", "--backend", "mlx-cpu", "--budget", "2", "--runs-dir", str(runs),
                          "--quiet"], capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr
    run = next(runs.iterdir())
    res = subprocess.run([*KS, "bench", "search-summary", run.name, "--runs-dir", str(runs), "--out", str(tmp_path)],
                         capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    summary = json.loads(next(tmp_path.glob("search-rmsnorm-*.json")).read_text())
    validate(summary)
    assert len(summary["figures"]) == 2
    assert summary["summary"]["evaluations_done"] == 2
    # the best judged on the holdout: its search workloads timed again there, beside the best score as found
    assert summary["summary"]["holdout_score"] > 0 and summary["summary"]["best_score_again"] > 0


@pytest.mark.parametrize("args", [
    ["bench", "naive", "--backend", "mlx-cpu"],
    ["bench", "fidelity", "--backend", "mlx-cpu"],
    ["bench", "eval-phases", "softmax", "--backend", "mlx-cpu"],
    ["bench", "search-summary", "any-run"],
    ["bench", "mamba", "--no-compare"],
])
@pytest.mark.parametrize("under_file", [False, True])
def test_every_bench_refuses_an_out_it_cannot_write_before_any_work(tmp_path: Path, args: list[str],
                                                                     under_file: bool) -> None:
    blocker = tmp_path / "results.json"
    blocker.write_text("kept")
    out = blocker / "sub" if under_file else blocker
    res = subprocess.run([*KS, *args, "--out", str(out)], capture_output=True, text=True, timeout=120)
    assert res.returncode == 2, res.stdout + res.stderr
    assert "--out" in res.stderr and "Traceback" not in res.stderr
    assert ("Not a directory" if under_file else "is a file, not a directory") in res.stderr
    assert blocker.read_text() == "kept"


def test_search_summary_of_a_run_that_is_not_there_is_one_error_line(tmp_path: Path) -> None:
    res = subprocess.run([*KS, "bench", "search-summary", "no-such-run", "--runs-dir", str(tmp_path), "--out",
                          str(tmp_path)], capture_output=True, text=True, timeout=120)
    assert res.returncode == 2 and res.stdout == "", res.stdout + res.stderr
    assert len(res.stderr.strip().splitlines()) == 1 and res.stderr.startswith("error: ")


@pytest.mark.parametrize(("flag", "value"), [("--reps", "0"), ("--decode-tokens", "0"), ("--batch", "-1"),
                                             ("--lengths", "0,512")])
def test_bench_mamba_refuses_counts_below_one(flag: str, value: str) -> None:
    res = subprocess.run([*KS, "bench", "mamba", "--no-compare", flag, value], capture_output=True, text=True,
                         timeout=120)
    assert res.returncode == 2 and "Traceback" not in res.stderr
    assert (flag if flag != "--lengths" else "positive integers") in res.stderr


def test_bench_mamba_refuses_a_scan_backend_that_does_not_exist(tmp_path: Path) -> None:
    res = subprocess.run([*KS, "bench", "mamba", "--no-compare", "--out", str(tmp_path)], capture_output=True,
                         text=True, timeout=120, env={**os.environ, "KSEARCH_SCAN_BACKEND": "gpu"})
    assert res.returncode == 2 and "Traceback" not in res.stderr
    assert "KSEARCH_SCAN_BACKEND='gpu': name one of ops, cuda, metal" in res.stderr
    assert list(tmp_path.iterdir()) == []
