"""`ksearch runs` lists what `ksearch run` wrote."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from ksearch.config import RunConfig
from ksearch.search.start import create_run, execute

sys.path.insert(0, str(Path(__file__).parent))
from test_search_loop import ScriptedPolicy, scripted_judge  # noqa: E402


def test_runs_lists_task_backend_policy_budget_and_best(tmp_path: Path) -> None:
    cfg = RunConfig(task="rmsnorm", backend="mlx-cpu", budget=3, runs_dir=str(tmp_path))
    store, _, _ = create_run(cfg)
    execute(store, cfg, evaluate=scripted_judge, policy=ScriptedPolicy({"A": [("passed", 1.5), ("passed", 1.7)]}))
    res = subprocess.run([sys.executable, "-m", "ksearch.cli", "runs", "--runs-dir", str(tmp_path)],
                         capture_output=True, text=True, timeout=60, env={"COLUMNS": "200", "PATH": "/usr/bin:/bin"})
    assert res.returncode == 0, res.stderr
    assert store.path.name in res.stdout
    assert "rmsnorm" in res.stdout and "mlx-cpu" in res.stdout and "offline" in res.stdout
    assert "3/3" in res.stdout and "1.700" in res.stdout


def test_runs_shows_the_best_re_measured_where_the_holdout_timed_it_again(tmp_path: Path) -> None:
    from ksearch.harness.result import EvalResult, WorkloadResult

    cfg = RunConfig(task="rmsnorm", backend="mlx-cpu", budget=2, runs_dir=str(tmp_path))
    store, _, _ = create_run(cfg)
    execute(store, cfg, evaluate=scripted_judge, policy=ScriptedPolicy({"A": [("passed", 1.5)]}))
    again = EvalResult("passed", workloads=[WorkloadResult("a", "search", speedup=1.25),
                                            WorkloadResult("h", "holdout", speedup=2.0)])
    store.set_meta("holdout", again.to_json())
    res = subprocess.run([sys.executable, "-m", "ksearch.cli", "runs", "--runs-dir", str(tmp_path)],
                         capture_output=True, text=True, timeout=60, env={"COLUMNS": "220", "PATH": "/usr/bin:/bin"})
    assert res.returncode == 0, res.stderr
    row = next(line for line in res.stdout.splitlines() if store.path.name in line)
    assert "re-measured" in res.stdout and "1.250" in row and "2.000" not in row


def test_runs_shows_the_pick_of_its_best_timed_again(tmp_path: Path) -> None:
    from ksearch.search.confirm import confirm_run

    cfg = RunConfig(task="rmsnorm", backend="mlx-cpu", budget=3, runs_dir=str(tmp_path))
    store, _, _ = create_run(cfg)
    execute(store, cfg, evaluate=scripted_judge, policy=ScriptedPolicy({"A": [("passed", 1.5), ("passed", 1.7)]}))
    store.close()
    out = confirm_run(store.path, top=2, times=1, evaluate=scripted_judge)
    res = subprocess.run([sys.executable, "-m", "ksearch.cli", "runs", "--runs-dir", str(tmp_path)],
                         capture_output=True, text=True, timeout=60, env={"COLUMNS": "240", "PATH": "/usr/bin:/bin"})
    assert res.returncode == 0, res.stderr
    row = next(line for line in res.stdout.splitlines() if store.path.name in line)
    assert out.pick is not None and f"{out.pick.candidate} {out.pick.median:.3f}" in row


def test_a_terminal_too_narrow_for_the_table_gets_each_run_whole(tmp_path: Path) -> None:
    cfg = RunConfig(task="rmsnorm", backend="mlx-cpu", budget=3, runs_dir=str(tmp_path))
    store, _, _ = create_run(cfg)
    execute(store, cfg, evaluate=scripted_judge, policy=ScriptedPolicy({"A": [("passed", 1.5), ("passed", 1.7)]}))
    res = subprocess.run([sys.executable, "-m", "ksearch.cli", "runs", "--runs-dir", str(tmp_path)],
                         capture_output=True, text=True, timeout=60, env={"COLUMNS": "80", "PATH": "/usr/bin:/bin"})
    assert res.returncode == 0, res.stderr
    lines = [line.rstrip() for line in res.stdout.splitlines()]
    assert "…" not in res.stdout and all(len(line) <= 80 for line in lines)
    assert lines[1] == store.path.name  # the run's name on a line of its own, never cut
    text = " ".join(line.strip() for line in lines[2:])
    assert "rmsnorm on mlx-cpu, offline policy, ksearch: finished (budget), 3/3 evaluations" in text
    assert "best score 1.700" in text and "LLM retries -" in text
