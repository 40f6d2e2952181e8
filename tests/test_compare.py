"""`ksearch compare`: best-so-far curves of several runs, final scores, evaluations to reach 90% of the best."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from test_report_fakerun import make_fake_run
from typer.testing import CliRunner

from ksearch.cli import app
from ksearch.report.compare import evaluations_to_reach, lines_for
from ksearch.report.rundata import load_run
from ksearch.store import RunStore


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    base = tmp_path_factory.mktemp("runs")
    paths = [make_fake_run(base, "r-ksearch"), make_fake_run(base, "r-greedy", scale=0.8)]
    store = RunStore(paths[1])
    store.set_meta("strategy", "greedy")
    store.close()
    return paths


def test_evaluations_to_reach() -> None:
    assert evaluations_to_reach([0.0, 0.5, 0.95, 1.0]) == 3
    assert evaluations_to_reach([1.0, 1.0]) == 1
    assert evaluations_to_reach([0.0, 0.0]) is None
    assert evaluations_to_reach([]) is None


def test_lines(runs: list[Path]) -> None:
    ks, gr = lines_for([load_run(p) for p in runs])
    assert (ks.label, gr.label) == ("ksearch", "greedy")  # strategies tell the runs apart
    assert ks.best == pytest.approx(1.31) and gr.best == pytest.approx(1.31 * 0.8)
    # best-so-far reaches 1.18 >= 0.9 * 1.31 at the 6th evaluation
    assert ks.to_reach == 6
    assert ks.curve == sorted(ks.curve) and len(ks.curve) == 12


@pytest.mark.parametrize("suffix, magic", [(".png", b"\x89PNG"), (".svg", b"<?xml"), (".html", b"<!DOCTYPE html>")])
def test_outputs(runs: list[Path], tmp_path: Path, suffix: str, magic: bytes) -> None:
    out = tmp_path / f"cmp{suffix}"
    r = CliRunner().invoke(app, ["compare", *map(str, runs), "--out", str(out)], env={"COLUMNS": "160"})
    assert r.exit_code == 0, r.output
    assert "ksearch" in r.output and "greedy" in r.output and "1.310" in r.output
    assert out.read_bytes().startswith(magic)
    if suffix == ".html":
        html = out.read_text()
        assert "<svg" in html and "r-greedy" in html
        assert not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", html), "the page must not fetch anything"


def test_the_table_cuts_nothing_short_and_breaks_no_run_id_in_80_columns(tmp_path: Path) -> None:
    # Run directories named as `ksearch run` names them; a process of its own, since the CLI's console takes its
    # width once a process.
    runs = [make_fake_run(tmp_path, f"20261207-0457{i}6-selective_scan-a8e0a{i}") for i in range(2)]
    r = subprocess.run([sys.executable, "-m", "ksearch.cli", "compare", *map(str, runs), "--out",
                        str(tmp_path / "cmp.svg")], capture_output=True, text=True, timeout=120,
                       env={**os.environ, "COLUMNS": "80"})
    assert r.returncode == 0, r.stderr
    assert "…" not in r.stdout and "ksearch / llm" in r.stdout and "1.310" in r.stdout, r.stdout
    # A run id is what users copy: whole on one line, never folded.
    assert all(any(p.name in line for line in r.stdout.splitlines()) for p in runs), r.stdout
    # The table fits; the "written: PATH" line after it keeps its path whole, however long (pytest-xdist's are).
    table = r.stdout.split("written:")[0]
    assert all(len(line.rstrip()) <= 80 for line in table.splitlines()), r.stdout


def test_html_renders_in_chromium(runs: list[Path], tmp_path: Path) -> None:
    from test_report_html import render

    out = tmp_path / "cmp.html"
    CliRunner().invoke(app, ["compare", *map(str, runs), "--out", str(out)])
    dom, console = render(out, tmp_path, "--dump-dom")
    assert console == []
    assert 'id="compare-chart"' in dom and "<svg" in dom[dom.index('id="compare-chart"'):][:300]


def test_mismatched_runs_warn(runs: list[Path], tmp_path: Path) -> None:
    other = make_fake_run(tmp_path, "r-other")
    store = RunStore(other)
    store.set_meta("task", "rmsnorm")
    store.close()
    r = CliRunner().invoke(app, ["compare", str(runs[0]), str(other)])
    assert r.exit_code == 0
    assert "not comparable" in r.output


def test_a_run_not_finished_shows_its_status_in_the_table_and_the_page(runs: list[Path], tmp_path: Path) -> None:
    live = make_fake_run(tmp_path, "r-live", status="running", n_evals=4)
    store = RunStore(live)
    store.set_meta("strategy", "evolve")
    store.close()
    out = tmp_path / "cmp.html"
    r = CliRunner().invoke(app, ["compare", str(runs[0]), str(live), "--out", str(out)], env={"COLUMNS": "200"})
    assert r.exit_code == 0, r.output
    def cells(line: str) -> list[str]:
        return [c.strip() for c in line.strip().strip("┃│").replace("┃", "│").split("│")]

    header = cells(next(line for line in r.output.splitlines() if "search best" in line))
    row = cells(next(line for line in r.output.splitlines() if "evolve /" in line))
    assert (header[-1], row[-1], row[2]) == ("status", "running", "4/12")
    assert "<th>status</th>" in (html := out.read_text()) and "<td>running</td>" in html and "<td>finished</td>" in html
    # finished runs only: no status column
    r = CliRunner().invoke(app, ["compare", *map(str, runs), "--out", str(out)], env={"COLUMNS": "200"})
    assert "status" not in r.output and "<th>status</th>" not in out.read_text()
