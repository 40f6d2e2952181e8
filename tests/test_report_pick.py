"""A run whose pick (its best few timed again, the highest median) is not the search's best: every view names the
candidate each score belongs to, and the holdout's figures are the pick's."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from test_report_fakerun import make_fake_run
from test_run_end import _ended
from test_runs_cli import runs_cli
from typer.testing import CliRunner

from ksearch.cli import app
from ksearch.report.rundata import load_run
from ksearch.report.summary import headline


@pytest.fixture(scope="module")
def picked(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str, str]:
    """The run (search scores 1.000; the pick's median 1.300, re-measured 1.100, holdout 0.900), its search best and
    its pick."""
    run, best, pick, _ = _ended(tmp_path_factory.mktemp("runs"), confirm_top=2)
    assert pick != best
    return run, best, pick


def flat(text: str) -> str:
    return " ".join(text.split())


def test_runs_names_the_candidate_of_each_score(picked: tuple[Path, str, str]) -> None:
    run, best, pick = picked
    out = flat(runs_cli(run.parent, 80).stdout)
    assert f"search best: {best} 1.000; pick (median): {pick} 1.300; re-measured: {pick} 1.100;" in out, out


def test_compare_pairs_each_score_with_its_candidate(picked: tuple[Path, str, str], tmp_path: Path) -> None:
    run, best, pick = picked
    other = make_fake_run(tmp_path)
    res = subprocess.run([sys.executable, "-m", "ksearch.cli", "compare", str(run), str(other)], capture_output=True,
                         text=True, timeout=120, env={**os.environ, "COLUMNS": "80"})
    assert res.returncode == 0, res.stderr
    out = flat(res.stdout)
    assert f"search best: {best} 1.000; pick's holdout: {pick} 0.900;" in out, out
    assert "search best: c0007 1.310; pick's holdout: c0007 1.250;" in out, out


def test_evaluations_number_each_row_and_show_the_holdout_score(picked: tuple[Path, str, str]) -> None:
    run, _, pick = picked
    r = CliRunner().invoke(app, ["report", str(run), "--evaluations"], env={"COLUMNS": "120"})
    assert r.exit_code == 0, r.output
    rows = [ln.split() for ln in r.output.splitlines() if ln.split() and ln.split()[0].isdigit()]
    assert [(row[0], row[1]) for row in rows] == [(str(i), "search") for i in range(1, 5)] + [
        (str(i), "confirm") for i in range(1, 7)] + [("1", "holdout")]
    held = dict(headline(load_run(run)))["holdout score"]
    assert held.startswith("0.900") and rows[-1][1:5] == ["holdout", pick, "passed", "0.900"]  # not the 1.100

    r = CliRunner().invoke(app, ["report", str(run), "--evaluations", "--json"])
    evals = json.loads(r.output)["evaluations"]
    assert [(e["kind"], e["n"]) for e in evals[4:]] == [("confirm", i) for i in range(1, 7)] + [("holdout", 1)]
    assert evals[-1]["score"] == pytest.approx(0.9) and evals[-1]["index"] == 4
