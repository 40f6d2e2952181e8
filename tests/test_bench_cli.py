"""The benchmark commands write results in the one schema."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

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
