"""search.start.start_run, the one path from a configuration to a run: the view is a callback handed in, and a replay
that diverges stops with the one ReplayMismatch, printed by the CLI as one line with exit 2."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from ksearch.cli import app
from ksearch.cli.live import LiveView
from ksearch.config import RunConfig
from ksearch.errors import ReplayMismatch
from ksearch.search.start import create_run, execute, start_run
from ksearch.store import RunStore

sys.path.insert(0, str(Path(__file__).parent))
from test_search_loop import scripted_judge  # noqa: E402


def recorded_run(base: Path) -> Path:
    """A finished offline run whose verdicts came from the scripted judge: a replay needs no worker at all."""
    cfg = RunConfig(task="softmax", backend="mlx-cpu", budget=4, runs_dir=str(base), seed=1)
    store, _, _ = create_run(cfg)
    execute(store, cfg, evaluate=scripted_judge)
    store.close()
    return store.path


def test_replay_reports_to_the_view_it_is_handed(tmp_path: Path) -> None:
    old = recorded_run(tmp_path / "runs")
    events: list[tuple[str, dict[str, Any]]] = []
    out = start_run(RunConfig(runs_dir=str(tmp_path / "replays")), replay=str(old),
                    on_event=lambda kind, data: events.append((kind, data)))
    kind, first = events[0]
    assert kind == "run_start"
    assert (first["task"], first["backend"], first["policy"], first["budget"]) == ("softmax", "mlx-cpu", "offline", 4)
    assert first["path"] == str(out.path) and out.path.parent == tmp_path / "replays"
    recorded = RunStore(old)
    statuses = [e["result"]["status"] for e in recorded.evaluations("search")]
    assert [d["status"] for k, d in events if k == "evaluation"] == statuses
    assert out.state.evaluations_done == recorded.get_meta("evaluations_done")


def test_the_live_view_draws_nothing_until_the_run_exists() -> None:
    with LiveView(enabled=True) as view:
        assert view.live is None
    view = LiveView(enabled=False)
    view("run_start", {"strategy": "ksearch", "task": "softmax", "backend": "mlx-cpu", "policy": "offline",
                       "budget": 7, "path": "runs/x"})
    view("evaluation", {"evaluations_done": 1, "best_score": 1.5, "status": "passed"})
    assert view.title == "K-Search on softmax (mlx-cpu, offline policy)\nrun directory runs/x"
    assert view.progress.tasks[0].total == 7 and view.best == 1.5 and view.live is None


def test_a_diverged_replay_is_one_error_line(tmp_path: Path) -> None:
    old = recorded_run(tmp_path / "runs")
    recorded = RunStore(old)
    second = recorded.evaluations("search")[1]["candidate_id"]
    path = old / recorded.candidate(second).path
    path.write_text(path.read_text() + "\nEDITED = 1\n")
    with pytest.raises(ReplayMismatch, match="evaluation 2: the candidate differs"):
        start_run(RunConfig(runs_dir=str(tmp_path / "replays")), replay=str(old))
    res = CliRunner().invoke(app, ["run", "--replay", str(old), "--runs-dir", str(tmp_path / "again"), "--quiet"])
    assert res.exit_code == 2, res.output
    lines = [ln for ln in res.output.splitlines() if ln.strip()]
    assert lines == ["error: evaluation 2: the candidate differs from the recorded one; use --reevaluate to "
                     "measure a diverging search again"], res.output


@pytest.mark.parametrize("under_file", [False, True])
def test_a_runs_directory_that_cannot_hold_runs_is_one_line(tmp_path: Path, under_file: bool) -> None:
    import subprocess

    blocker = tmp_path / "runs"
    blocker.write_text("kept")
    where = blocker / "sub" if under_file else blocker
    res = subprocess.run([sys.executable, "-m", "ksearch.cli", "run", "softmax", "--backend", "mlx-cpu", "--budget",
                          "1", "--runs-dir", str(where), "--quiet"], capture_output=True, text=True, timeout=120)
    assert res.returncode == 2 and "Traceback" not in res.stderr, res.stderr
    assert "--runs-dir" in res.stderr
    assert ("Not a directory" if under_file else "is a file") in res.stderr
    assert blocker.read_text() == "kept"
