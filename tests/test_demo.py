"""`make demo`'s exact command, with a tiny budget."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path


def _demo_command() -> list[str]:
    text = (Path(__file__).resolve().parents[1] / "Makefile").read_text()
    line = next(ln.strip() for ln in text.splitlines() if "ksearch demo" in ln)
    # $(BIN)/ksearch demo --budget $(DEMO_BUDGET)
    args = line.split("ksearch", 1)[1].split()
    return [a for a in args if not a.startswith("$(")]


def test_demo_command_runs_a_search(tmp_path: Path) -> None:
    args = _demo_command()
    assert args[:2] == ["demo", "--budget"]
    # The starting kernel and one proposal: the demo's whole path (search, holdout, summary) at the least cost.
    res = subprocess.run([sys.executable, "-m", "ksearch.cli", "demo", "--budget", "2", "--runs-dir", str(tmp_path),
                          "--quiet"], capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stderr
    assert "best score" in res.stdout
    assert "timed again 2 times each" in res.stdout and "pick:" in res.stdout  # its best timed again
    assert re.search(r"2 evaluations", res.stdout)
    assert any((d / "run.db").is_file() for d in tmp_path.iterdir())


def test_the_demo_searches_the_budget_it_is_given(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    from typer.testing import CliRunner

    from ksearch.cli import app, demo

    asked: list[int] = []
    monkeypatch.setattr(demo, "run_demo", lambda backend, budget, *a, **k: asked.append(budget))
    res = CliRunner().invoke(app, ["demo", "--budget", "50", "--quiet"])
    assert res.exit_code == 0, res.output
    assert asked == [50]


def test_the_demo_writes_where_ksearch_run_does(monkeypatch, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    from typer.testing import CliRunner

    from ksearch.cli import app, demo
    from ksearch.errors import UsageError

    given: list[str] = []

    def start_run(cfg, **_kwargs):  # type: ignore[no-untyped-def]
        given.append(cfg.runs_dir)
        raise UsageError("stopped before the search")

    monkeypatch.setattr(demo, "start_run", start_run)
    monkeypatch.setenv("KSEARCH_RUNS_DIR", str(tmp_path / "from-env"))
    assert CliRunner().invoke(app, ["demo", "--budget", "1", "--quiet"]).exit_code == 2
    assert CliRunner().invoke(app, ["demo", "--budget", "1", "--quiet", "--runs-dir", "flag"]).exit_code == 2
    monkeypatch.delenv("KSEARCH_RUNS_DIR")
    assert CliRunner().invoke(app, ["demo", "--budget", "1", "--quiet"]).exit_code == 2
    assert given == [str(tmp_path / "from-env"), "flag", "runs"]


def test_the_next_step_pastes_into_a_shell_as_it_is() -> None:
    import shlex

    from ksearch.cli.demo import next_step

    run = Path("/tmp/my runs/20261201-120000-selective_scan-abc")
    command = next_step(run).removeprefix("next: ").split("  (see README")[0]
    assert shlex.split(command) == ["ksearch", "report", str(run)]
