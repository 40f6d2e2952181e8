"""`ksearch runs` lists what `ksearch run` wrote."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from ksearch.config import RunConfig
from ksearch.search.start import create_run, execute

sys.path.insert(0, str(Path(__file__).parent))
from test_search_loop import ScriptedPolicy, scripted_judge  # noqa: E402


def runs_cli(runs_dir: Path, columns: int) -> subprocess.CompletedProcess[str]:
    """`ksearch runs` in a terminal that many columns wide, in a bare environment but for the import path (the
    ksearch under test)."""
    env = {"COLUMNS": str(columns), "PATH": "/usr/bin:/bin"}
    if "PYTHONPATH" in os.environ:
        env["PYTHONPATH"] = os.environ["PYTHONPATH"]
    res = subprocess.run([sys.executable, "-m", "ksearch.cli", "runs", "--runs-dir", str(runs_dir)],
                         capture_output=True, text=True, timeout=60, env=env)
    assert res.returncode == 0, res.stderr
    return res


def listed_run(tmp_path: Path, columns: int) -> tuple[Path, subprocess.CompletedProcess[str]]:
    """A finished three-evaluation run, and `ksearch runs` in a terminal that many columns wide."""
    cfg = RunConfig(task="rmsnorm", backend="mlx-cpu", budget=3, runs_dir=str(tmp_path))
    store, _, _ = create_run(cfg)
    execute(store, cfg, evaluate=scripted_judge, policy=ScriptedPolicy({"A": [("passed", 1.5), ("passed", 1.7)]}))
    return store.path, runs_cli(tmp_path, columns)


def test_runs_lists_task_backend_policy_budget_and_best(tmp_path: Path) -> None:
    path, res = listed_run(tmp_path, 200)
    assert path.name in res.stdout
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
    res = runs_cli(tmp_path, 220)
    row = next(line for line in res.stdout.splitlines() if store.path.name in line)
    assert "re-measured" in res.stdout and "1.250" in row and "2.000" not in row


def test_runs_shows_the_pick_of_the_confirmation_that_chose_the_result(tmp_path: Path) -> None:
    from ksearch.search.run_end import check_again

    cfg = RunConfig(task="rmsnorm", backend="mlx-cpu", budget=3, runs_dir=str(tmp_path))
    store, _, _ = create_run(cfg)
    execute(store, cfg, evaluate=scripted_judge, policy=ScriptedPolicy({"A": [("passed", 1.5), ("passed", 1.7)]}))
    store.close()
    adopted = check_again(store.path, 2, 1, scripted_judge, None, adopt=True)
    res = runs_cli(tmp_path, 240)
    row = next(line for line in res.stdout.splitlines() if store.path.name in line)
    pick = adopted.confirmation.pick
    assert pick is not None and f"{pick.candidate} {pick.median:.3f}" in row
    # a later check that is not adopted (here every candidate timed at 2.000) leaves the run's pick as it was
    later = check_again(store.path, 2, 1, lambda source: scripted_judge(f"SCORE = 2.0\n{source}"), None,
                        adopt=False)
    assert not later.adopted and later.confirmation.pick is not None
    res = runs_cli(tmp_path, 240)
    row = next(line for line in res.stdout.splitlines() if store.path.name in line)
    assert f"{pick.candidate} {pick.median:.3f}" in row and "2.000" not in row


def test_a_terminal_too_narrow_for_the_table_gets_each_run_whole(tmp_path: Path) -> None:
    path, res = listed_run(tmp_path, 80)
    lines = [line.rstrip() for line in res.stdout.splitlines()]
    assert "…" not in res.stdout and all(len(line) <= 80 for line in lines)
    assert lines[1] == path.name  # the run's name on a line of its own, never cut
    text = " ".join(line.strip() for line in lines[2:])
    assert "task: rmsnorm; backend: mlx-cpu; policy: offline; strategy: ksearch; budget used: 3/3; " in text
    assert "search best: c0002 1.700" in text and "status: finished; reason: budget; retries: -" in text


def test_the_fitted_table_is_a_table_where_it_fits_and_whole_records_where_not() -> None:
    from rich.console import Console
    from rich.markup import escape

    from ksearch.report.tables import fitted_table

    rows = [("[b]first[/b]", "a value long enough to need some room", "x" * 30), ("second", escape("[brackets]?"), "-")]
    for width, table in ((200, True), (60, False)):
        console = Console(width=width, record=True, file=open(os.devnull, "w"))  # noqa: SIM115
        console.print(fitted_table(console, "things", ("name", "what", "more"), rows, "a caption"))
        out = console.export_text()
        assert ("┃ name" in out) is table and "…" not in out and "a caption" in out and "[brackets]?" in out
        assert all(len(line.rstrip()) <= width for line in out.splitlines())
        if not table:
            assert out.splitlines()[:2] == ["things", "first"]  # markup rendered, not printed
            assert "what: a value long enough" in out and "x" * 30 in out


def _runs(*args: str, cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "ksearch.cli", "runs", *args], capture_output=True, text=True,
                          timeout=60, cwd=cwd, env={**{k: v for k, v in os.environ.items() if k != "KSEARCH_RUNS_DIR"},
                                                    **(env or {})})


def test_a_runs_dir_that_is_a_file_is_one_line(tmp_path: Path) -> None:
    (tmp_path / "a-file").write_text("")
    res = _runs("--runs-dir", str(tmp_path / "a-file"), cwd=tmp_path)
    assert res.returncode == 2 and "is a file, not a directory" in res.stderr and not res.stdout, res


def test_a_runs_dir_that_is_not_there_is_one_line(tmp_path: Path) -> None:
    for res in (_runs("--runs-dir", str(tmp_path / "missing"), cwd=tmp_path),
                _runs(cwd=tmp_path, env={"KSEARCH_RUNS_DIR": str(tmp_path / "missing")})):
        assert res.returncode == 2 and f"no runs folder at {tmp_path / 'missing'}" in res.stderr, res


def test_before_the_first_run_there_are_no_runs_yet(tmp_path: Path) -> None:
    res = _runs(cwd=tmp_path)  # the default runs/ is made by the first run
    assert res.returncode == 0 and "no runs yet" in res.stdout, res
    (tmp_path / "empty").mkdir()
    res = _runs("--runs-dir", str(tmp_path / "empty"), cwd=tmp_path)
    assert res.returncode == 0 and "no runs yet" in res.stdout, res


def test_a_run_whose_database_cannot_be_read_is_listed_as_unreadable_with_why(tmp_path: Path) -> None:
    (tmp_path / "broken").mkdir()
    (tmp_path / "broken" / "run.db").write_bytes(b"x" * 4096)
    alone = runs_cli(tmp_path, 200)
    assert "no runs yet" not in alone.stdout and "runs (1, 1 unreadable)" in alone.stdout, alone.stdout
    row = next(line for line in alone.stdout.splitlines() if "broken" in line)
    assert "unreadable" in row and "file is not a database" in row, alone.stdout
    path, res = listed_run(tmp_path, 240)  # beside a readable run, still listed
    assert "runs (2, 1 unreadable)" in res.stdout and path.name in res.stdout, res.stdout
    assert "file is not a database" in next(line for line in res.stdout.splitlines() if "broken" in line)


def test_json_is_one_array_with_each_score_beside_its_candidate(tmp_path: Path) -> None:
    import json

    from ksearch.harness.result import EvalResult, WorkloadResult
    from ksearch.store import RunStore

    (tmp_path / "broken").mkdir()
    (tmp_path / "broken" / "run.db").write_bytes(b"x" * 4096)
    path, _ = listed_run(tmp_path, 200)
    again = EvalResult("passed", workloads=[WorkloadResult("a", "search", speedup=1.25)])
    store = RunStore(path)
    store.set_meta("holdout", again.to_json())
    store.close()
    res = _runs("--runs-dir", str(tmp_path), "--json", cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    records = {r["run"]: r for r in json.loads(res.stdout)}  # the whole of stdout is one document
    run = records[path.name]
    assert (run["task"], run["evaluations_done"], run["budget"], run["status"]) == ("rmsnorm", 3, 3, "finished")
    assert run["search_best"]["score"] == 1.7 and run["search_best"]["candidate"]
    assert run["re_measured"] == {"candidate": run["search_best"]["candidate"], "score": 1.25}
    assert records["broken"]["status"] == "unreadable" and "not a database" in records["broken"]["reason"]
    empty = _runs("--runs-dir", str(tmp_path / "none-yet"), "--json", cwd=tmp_path)
    assert empty.returncode == 2 and not empty.stdout  # a named folder that is not there: one line, as without --json
    (tmp_path / "none-yet").mkdir()
    assert json.loads(_runs("--runs-dir", str(tmp_path / "none-yet"), "--json", cwd=tmp_path).stdout) == []
