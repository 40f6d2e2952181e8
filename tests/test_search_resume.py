"""A real offline search on the CPU, killed with SIGKILL mid-run, resumed to the end: nothing lost but the evaluation
in flight, no worker left behind."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from ksearch.report.rundata import load_run
from ksearch.report.summary import headline
from ksearch.store import RunNotFound, RunReader, RunUnreadable, read_run

KS = [sys.executable, "-m", "ksearch.cli"]


def _evals(run: Path) -> int:
    try:
        with RunReader(run) as reader:
            return len(reader.evaluations("search"))
    except (RunNotFound, RunUnreadable):  # the search has not written its tables yet
        return 0


@pytest.mark.slow
def test_sigkill_then_resume(tmp_path: Path) -> None:
    # Killed after 3 evaluations: a budget of 5 leaves the one in flight and one more for the resumed run to do.
    proc = subprocess.Popen([*KS, "run", "softmax", "--backend", "mlx-cpu", "--budget", "5", "--runs-dir",
                             str(tmp_path), "--quiet", "--seed", "3"], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    deadline = time.time() + 240
    run = None
    while time.time() < deadline:
        runs = [d for d in tmp_path.iterdir() if (d / "run.db").exists()]
        if runs and _evals(runs[0]) >= 3:
            run = runs[0]
            break
        time.sleep(0.3)
    assert run is not None, proc.communicate(timeout=5)
    children = psutil.Process(proc.pid).children(recursive=True)
    assert children, "the search should have workers running"
    os.kill(proc.pid, signal.SIGKILL)  # the search process only: its workers must die with it
    proc.wait(timeout=10)
    done_at_kill = _evals(run)
    gone, alive = psutil.wait_procs(children, timeout=10)
    assert not alive, f"workers outlived the killed search: {[p.pid for p in alive]}"
    # Its status still says running; every reader shows it as interrupted, with the reason.
    assert read_run(run).meta.status == "running"
    listed = subprocess.run([*KS, "runs", "--runs-dir", str(tmp_path)], capture_output=True, text=True, timeout=120,
                            env={**os.environ, "COLUMNS": "250"})
    row = next(line for line in listed.stdout.splitlines() if run.name in line)
    assert "interrupted" in row and "running" not in row, listed.stdout
    assert dict(headline(load_run(run)))["status"].startswith(f"interrupted: its search process (pid {proc.pid})")
    res = subprocess.run([*KS, "run", "--resume", run.name, "--runs-dir", str(tmp_path), "--quiet"],
                         capture_output=True, text=True, timeout=400)
    assert res.returncode == 0, res.stderr
    recs = read_run(run)
    assert recs.meta.status == "finished"
    assert recs.meta.evaluations_done == 5
    # No evaluation counted twice, none lost but the one in flight.
    assert [e.eval_index for e in recs.evaluations_of("search")] == list(range(1, 6))
    assert done_at_kill >= 3
    assert (run / "best.py").is_file()


def test_resume_unknown_run_is_a_clear_error(tmp_path: Path) -> None:
    res = subprocess.run([*KS, "run", "--resume", "nope", "--runs-dir", str(tmp_path)], capture_output=True, text=True)
    assert res.returncode == 2
    assert "no run 'nope'" in res.stderr


@pytest.mark.slow
def test_a_run_that_spends_its_wall_time_is_judged_on_the_holdout(tmp_path: Path) -> None:
    """The real CLI on the CPU: a wall time shorter than one evaluation ends the run after the starting kernel, as
    finished, with the best judged on the holdout workloads (a wall-time end used to leave it stopped, unjudged)."""
    proc = subprocess.run([*KS, "run", "softmax", "--backend", "mlx-cpu", "--budget", "50", "--wall-time", "1",
                           "--confirm-top", "3", "--runs-dir", str(tmp_path), "--quiet"], capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "holdout score" in proc.stdout and "best re-measured" in proc.stdout
    run = next(tmp_path.iterdir())
    recs = read_run(run)
    assert recs.meta.status == "finished" and (recs.meta.holdout or {}).get("status") == "passed"
    # then its one passed candidate timed again twice (confirm_times), in its own rows, before the holdout judges
    # the pick (search/run_end.py)
    assert [e.kind for e in recs.evaluations] == ["search", "confirm", "confirm", "holdout"]
    # The end's reason: the last line of `ksearch run`, the reason column of `ksearch runs`, the report's status.
    assert f"run {run.name} finished: the wall time of 1 s is spent" in " ".join(proc.stdout.split())
    assert recs.meta.stop_kind == "wall_time"
    listed = subprocess.run([*KS, "runs", "--runs-dir", str(tmp_path)], capture_output=True, text=True, timeout=120,
                            env={**os.environ, "COLUMNS": "250"})
    assert "wall time" in next(line for line in listed.stdout.splitlines() if run.name in line), listed.stdout
    assert dict(headline(load_run(run)))["status"].startswith("finished: the wall time of 1 s is spent")

    def resume(*extra: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([*KS, "run", "--resume", run.name, "--runs-dir", str(tmp_path), "--quiet", *extra],
                              capture_output=True, text=True, timeout=600)

    # Finished on its wall time: a plain resume says how to continue; a limit it has already used is refused.
    for extra, words in (((), "--wall-time"), (("--budget", "1"), "not above the 1 evaluations"),
                         (("--wall-time", "0.5"), "not above the"),
                         # --stop-after counts the run's evaluations: at or below those done, it would do nothing
                         (("--budget", "5", "--wall-time", "900", "--stop-after", "1"), "has done 1 evaluations")):
        res = resume(*extra)
        assert res.returncode == 2 and words in res.stderr and len(res.stderr.strip().splitlines()) == 1, res.stderr
    assert read_run(run).meta.get("config")["budget"] == 50  # nothing refused changed the run
    # Raised limits: it continues to the new budget (one evaluation past the first shows it) and is judged on the
    # holdout again.
    res = resume("--budget", "2", "--wall-time", "900")
    assert res.returncode == 0, res.stderr[-2000:]
    recs = read_run(run)
    kinds = [e.kind for e in recs.evaluations]
    assert [k for k in kinds if k != "confirm"] == ["search", "holdout", "search", "holdout"]
    assert kinds[1:3] == ["confirm", "confirm"] and kinds[-2:] == ["confirm", "holdout"]  # each end: again, holdout
    assert recs.meta.get("chosen_candidate") == recs.evaluations[-1].candidate_id  # the holdout judged the pick
    config = recs.meta.get("config")
    assert recs.meta.status == "finished" and config["budget"] == 2 and config["wall_time_s"] == 900
    assert json.loads((run / "config.json").read_text())["budget"] == 2


def test_resume_refuses_settings_a_run_started_with(tmp_path: Path) -> None:
    """Only the limits can change on --resume; a changed backend or policy is refused, never ignored without a word."""
    res = subprocess.run([*KS, "run", "--resume", "any", "--backend", "mlx-cpu", "--policy", "llm", "--runs-dir",
                          str(tmp_path)], capture_output=True, text=True, timeout=120)
    assert res.returncode == 2
    assert "--backend, --policy cannot change" in res.stderr and len(res.stderr.strip().splitlines()) == 1, res.stderr


@pytest.mark.parametrize("stop, code, how", [(KeyboardInterrupt, 130, "Ctrl-C"), ("terminated", 143, "SIGTERM")])
def test_an_interrupted_runs_hint_works_as_pasted_in_another_folder(stop: type[BaseException] | str, code: int,
                                                                    how: str, tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    import shlex

    from typer.testing import CliRunner

    from ksearch.cli import app
    from ksearch.search import start
    from ksearch.store import resolve_run

    made: list[Path] = []

    def interrupted(cfg, on_event=None, **_kwargs):  # type: ignore[no-untyped-def]
        store, _, _ = start.create_run(cfg)
        made.append(store.path)
        store.close()
        on_event("run_start", {"strategy": cfg.strategy, "task": "softmax", "backend": cfg.backend,
                               "policy": cfg.policy, "budget": cfg.budget, "path": str(store.path), "workers": 1})
        raise start.Terminated() if stop == "terminated" else stop()

    monkeypatch.setattr(start, "start_run", interrupted)
    (tmp_path / "here").mkdir()
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "here")
    res = CliRunner().invoke(app, ["run", "softmax", "--backend", "mlx-cpu", "--runs-dir", str(tmp_path / "runs"),
                                   "--quiet"])
    assert res.exit_code == code, res.output
    line = " ".join(res.output.split())
    assert f"run {made[0].name} stopped: interrupted ({how}); `" in line, res.output
    pasted = shlex.split(line.split("`")[1])
    assert pasted[:3] == ["ksearch", "run", "--resume"], pasted

    resumed: list[Path] = []

    def resume(cfg, resume=None, **_kwargs):  # type: ignore[no-untyped-def]
        resumed.append(resolve_run(resume, cfg.runs_dir))
        raise start.RunError("looked up")

    monkeypatch.setattr(start, "start_run", resume)
    monkeypatch.chdir(tmp_path / "elsewhere")
    assert CliRunner().invoke(app, pasted[1:]).exit_code == 2
    assert resumed == [made[0]]


def test_resume_with_the_runs_task_named_says_to_leave_task_out(tmp_path: Path) -> None:
    """TASK given with --resume (most often the run's own) is left out, not a setting that cannot change."""
    alone = subprocess.run([*KS, "run", "--resume", "any", "selective_scan", "--runs-dir", str(tmp_path)],
                           capture_output=True, text=True, timeout=120)
    assert alone.returncode == 2 and len(alone.stderr.strip().splitlines()) == 1, alone.stderr
    assert "TASK is left out with --resume: the run keeps its task" in alone.stderr, alone.stderr
    assert "cannot change" not in alone.stderr
    both = subprocess.run([*KS, "run", "--resume", "any", "selective_scan", "--backend", "mlx-cpu", "--runs-dir",
                           str(tmp_path)], capture_output=True, text=True, timeout=120)
    assert both.returncode == 2 and len(both.stderr.strip().splitlines()) == 1, both.stderr
    assert "--backend cannot change" in both.stderr and "TASK is left out (the run keeps its task)" in both.stderr


def test_replay_refuses_settings_and_a_run_that_has_not_ended(tmp_path: Path) -> None:
    """A replay runs with its run's recorded settings, so a setting given beside it is refused rather than ignored;
    a run paused before its end replays only as far as it recorded (past that the replay could only fail), and a
    refusal leaves no run directory."""
    def ks(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([*KS, "run", *args, "--runs-dir", str(tmp_path), "--quiet"], capture_output=True,
                              text=True, timeout=600)

    first = ks("softmax", "--backend", "mlx-cpu", "--budget", "3", "--stop-after", "1", "--confirm-top", "0")
    assert first.returncode == 0, first.stderr[-2000:]
    (run,) = tmp_path.iterdir()
    for extra, words in ((("--budget", "7", "--backend", "mlx-metal"), "leave out --backend, --budget"),
                         (("softmax",), "leave out TASK"), (("--resume", run.name), "leave out --resume"),
                         ((), "is stopped after 1 evaluation(s): a replay reproduces a run that has ended; pass "
                              "--stop-after 1"),
                         (("--stop-after", "2"), "pass --stop-after 1")):
        res = ks("--replay", run.name, *extra)
        assert res.returncode == 2 and words in res.stderr and len(res.stderr.strip().splitlines()) == 1, res.stderr
        assert list(tmp_path.iterdir()) == [run]
    res = ks("--replay", run.name, "--stop-after", "1")
    assert res.returncode == 0, res.stderr[-2000:]
    assert len(list(tmp_path.iterdir())) == 2
