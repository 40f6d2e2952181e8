"""`ksearch report` in the terminal, and its bad-input paths."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from test_report_fakerun import make_fake_run
from typer.testing import CliRunner

from ksearch.cli import app
from ksearch.report.rundata import load_run


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    base = tmp_path_factory.mktemp("runs")
    make_fake_run(base)
    return base


def invoke(*args: str) -> tuple[int, str]:
    r = CliRunner().invoke(app, list(args), env={"COLUMNS": "160"})
    return r.exit_code, r.output


def test_summary_names_what_matters(runs: Path) -> None:
    code, out = invoke("report", "20261129-120000-softmax-abc123", "--runs-dir", str(runs))
    assert code == 0, out
    for text in ("c0007", "1.310", "best re-measured", "1.220", "holdout score", "1.250", "12/12", "$0.0324", "cpu_128x4096_f32", "1.38x",
                 "16.5%", "path to the best", "Multiply by the reciprocal of the sum", "world model", "backtrack 1",
                 "too hard 1"):
        assert text in out, text
    # The path runs root -> n1 -> n2 in that order.
    path_line = out[out.index("path to the best"):]
    assert path_line.index("Fuse max and exp") < path_line.index("Multiply by the reciprocal")


def test_report_by_path_and_env(runs: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    run_dir = runs / "20261129-120000-softmax-abc123"
    code, out = invoke("report", str(run_dir), "--no-tree", "--html", str(tmp_path / "sub" / "r.html"))
    assert code == 0, out
    assert (tmp_path / "sub" / "r.html").read_text().startswith("<!DOCTYPE html>")
    monkeypatch.setenv("KSEARCH_RUNS_DIR", str(runs))
    code, out = invoke("report", "20261129-120000-softmax-abc123", "--no-tree")
    assert code == 0 and "c0007" in out


@pytest.mark.parametrize("args, message", [
    (["report", "no-such-run"], "no run 'no-such-run'"),
    (["compare", "20261129-120000-softmax-abc123"], "at least two runs"),
    (["compare", "20261129-120000-softmax-abc123", "20261129-120000-softmax-abc123", "--out", "x.pdf"], ".png"),
    (["export", "20261129-120000-softmax-abc123", "--format", "cuda"], "module or flashinfer-trace"),
    (["watch", "nope", "--once"], "no run 'nope'"),
])
def test_bad_input_is_one_line_exit_2(runs: Path, args: list[str], message: str) -> None:
    code, out = invoke(*args, "--runs-dir", str(runs))
    assert code == 2, out
    assert message in out
    assert "Traceback" not in out


def test_corrupt_database_is_a_clean_error(tmp_path: Path) -> None:
    bad = tmp_path / "broken"
    bad.mkdir()
    (bad / "run.db").write_bytes(b"this is not sqlite" * 100)
    code, out = invoke("report", str(bad))
    assert code == 2 and "cannot read" in out


def test_report_does_not_write_to_the_run(runs: Path) -> None:
    """Reading must never change a run another process may be writing (no schema, no WAL switch, no meta)."""
    run_dir = runs / "20261129-120000-softmax-abc123"
    # run.db-shm is SQLite's shared-memory index, which every reader of a WAL database updates by design.
    before = {p.name: p.stat().st_mtime_ns for p in run_dir.iterdir() if not p.name.endswith("-shm")}
    load_run(run_dir)
    invoke("report", str(run_dir))
    after = {p.name: p.stat().st_mtime_ns for p in run_dir.iterdir() if not p.name.endswith("-shm")}
    assert {k: v for k, v in after.items() if k in before} == before


def test_run_without_a_pass(tmp_path: Path) -> None:
    run_dir = make_fake_run(tmp_path, "early", status="running", n_evals=2)
    run = load_run(run_dir)
    assert run.best_candidate == "c0000"  # no best in meta yet: the best passed search evaluation
    code, out = invoke("report", str(run_dir))
    assert code == 0 and "running" in out


def test_evaluations_table(runs: Path) -> None:
    code, out = invoke("report", "20261129-120000-softmax-abc123", "--runs-dir", str(runs), "--evaluations")
    assert code == 0, out
    assert "path to the best" not in out  # the table instead of the summary
    rows = [ln.split() for ln in out.splitlines() if ln.split() and ln.split()[0].isdigit()]
    # Every search evaluation, then the holdout re-measurement of the best: index kind candidate status score seconds.
    assert len(rows) == 13
    assert rows[7] == ["7", "search", "c0007", "passed", "1.310", "2.5"]
    assert rows[1][3] == "compile_error" and rows[1][4] == "0.000"
    assert rows[-1][1:4] == ["holdout", "c0007", "passed"]


def test_evaluations_json(runs: Path) -> None:
    import json

    code, out = invoke("report", "20261129-120000-softmax-abc123", "--runs-dir", str(runs), "--evaluations", "--json")
    assert code == 0, out
    data = json.loads(out)
    assert data["run"] == "20261129-120000-softmax-abc123" and data["task"] == "softmax"
    evals = data["evaluations"]
    assert [e["kind"] for e in evals] == ["search"] * 12 + ["holdout"]
    assert evals[7] == {"n": 7, "kind": "search", "candidate": "c0007", "status": "passed",
                        "score": pytest.approx(1.31), "seconds": 2.5, "index": 7}
    assert evals[-1]["score"] == pytest.approx(1.25)  # the holdout score, as the summary's


def test_json_needs_evaluations(runs: Path) -> None:
    code, out = invoke("report", "20261129-120000-softmax-abc123", "--runs-dir", str(runs), "--json")
    assert code == 2 and "--json goes with --evaluations" in out and "Traceback" not in out


@pytest.mark.parametrize("args", [
    ["report", "--html", "{blocker}/r.html"],
    ["export", "--out", "{blocker}/kernel.py"],
    ["export", "--format", "flashinfer-trace", "--out", "{blocker}/trace"],
    ["compare", "20261129-120000-softmax-abc123", "--out", "{blocker}/deep/curves.png"],
])
def test_an_output_under_a_file_is_one_line_before_anything_is_written(runs: Path, tmp_path: Path,
                                                                       args: list[str]) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("kept")
    argv = [args[0], "20261129-120000-softmax-abc123", *(a.format(blocker=blocker) for a in args[1:])]
    code, out = invoke(*argv, "--runs-dir", str(runs))
    assert code == 2, out
    assert "is a file" in out or "Not a directory" in out, out
    assert "Traceback" not in out and "best re-measured" not in out  # the report's summary is not printed first
    assert blocker.read_text() == "kept"


OUTPUTS = [
    ["report", "--html", "{folder}/r.html"],
    ["export", "--out", "{folder}/kernel.py"],
    ["export", "--format", "flashinfer-trace", "--out", "{folder}/trace"],
    ["compare", "20261129-120000-softmax-abc123", "--out", "{folder}/curves.png"],
]


def _refused_before_anything_is_printed(runs: Path, args: list[str], folder: Path) -> str:
    argv = [args[0], "20261129-120000-softmax-abc123", *(a.format(folder=folder) for a in args[1:])]
    code, out = invoke(*argv, "--runs-dir", str(runs))
    assert code == 2, out
    assert "Traceback" not in out and "best re-measured" not in out
    return out


@pytest.mark.parametrize("args", OUTPUTS)
def test_an_output_in_a_folder_that_takes_no_files_is_one_line(runs: Path, args: list[str]) -> None:
    # /proc is there and is a directory, and no file can be made in it, not even by root.
    out = _refused_before_anything_is_printed(runs, args, Path("/proc"))
    assert "is not writable" in out or "cannot be made" in out, out


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into a read-only folder")
@pytest.mark.parametrize("args", OUTPUTS)
def test_an_output_in_a_read_only_folder_is_one_line(runs: Path, tmp_path: Path, args: list[str]) -> None:
    folder = tmp_path / "read-only"
    folder.mkdir()
    folder.chmod(0o500)
    try:
        out = _refused_before_anything_is_printed(runs, args, folder)
    finally:
        folder.chmod(0o700)
    assert "is not writable" in out or "cannot be made" in out, out
    assert not any(folder.iterdir())


@pytest.mark.parametrize("args, where", [
    (["report", "--html", "{tmp}/r.html"], "ksearch.report.html.write_html"),
    (["export", "--out", "{tmp}/kernel.py"], "ksearch.report.export.write_module"),
    (["export", "--format", "flashinfer-trace", "--out", "{tmp}/trace"], "ksearch.report.export.write_flashinfer_trace"),
    (["compare", "20261129-120000-softmax-abc123", "--out", "{tmp}/curves.png"], "ksearch.report.compare.write_compare"),
])
def test_a_write_that_fails_after_the_check_is_one_line(runs: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                        args: list[str], where: str) -> None:
    """The folder can change between the check and the write (or the disk fill): still one line, exit 2."""
    def refuse(*_: object) -> None:
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(where, refuse)
    argv = [args[0], "20261129-120000-softmax-abc123", *(a.format(tmp=tmp_path) for a in args[1:])]
    code, out = invoke(*argv, "--runs-dir", str(runs))
    assert code == 2, out
    assert "Traceback" not in out and "cannot write" in out and "Permission denied" in out, out


def test_a_directory_as_the_html_file_is_one_line(runs: Path, tmp_path: Path) -> None:
    code, out = invoke("report", "20261129-120000-softmax-abc123", "--runs-dir", str(runs), "--html", str(tmp_path))
    assert code == 2 and "is a directory; name a file" in out and "report.html" in out, out


@pytest.mark.parametrize("command", [["report", "x"], ["export", "x"], ["watch", "x", "--once"],
                                     ["compare", "x", "y"], ["confirm", "x"]])
def test_a_runs_dir_that_is_not_a_folder_is_named(command: list[str], tmp_path: Path) -> None:
    a_file = tmp_path / "a-file"
    a_file.write_text("")
    code, out = invoke(*command, "--runs-dir", str(a_file))
    assert code == 2 and "is a file, not a directory" in out, out
    code, out = invoke(*command, "--runs-dir", str(tmp_path / "missing"))
    assert code == 2 and "no runs folder at" in out, out
