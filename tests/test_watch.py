"""`ksearch watch`: one frame with --once, and following a run until another process marks it finished."""

from __future__ import annotations

import threading
import time
from pathlib import Path

from rich.console import Console
from test_report_fakerun import make_fake_run
from typer.testing import CliRunner

from ksearch.cli import app
from ksearch.report.rundata import load_run
from ksearch.report.watch import frame, watch
from ksearch.store import RunStore


def test_once_prints_one_frame(tmp_path: Path) -> None:
    run_dir = make_fake_run(tmp_path, "live", status="running")
    r = CliRunner().invoke(app, ["watch", str(run_dir), "--once"], env={"COLUMNS": "120"})
    assert r.exit_code == 0, r.output
    for text in ("running", "budget", "12/12", "1.310", "c0007", "current action", "Process rows in blocks of 64",
                 "timeout"):
        assert text in r.output, text


def test_stale_run_is_flagged(tmp_path: Path) -> None:
    run = load_run(make_fake_run(tmp_path, "stale", status="running"))
    console = Console(record=True, width=120)
    console.print(frame(run, now=time.time() + 3600))
    assert "is the search process alive" in console.export_text()


def test_follows_until_finished(tmp_path: Path) -> None:
    run_dir = make_fake_run(tmp_path, "follow", status="running", n_evals=4)

    def writer() -> None:
        # Another process's view: the loop adds an evaluation, then finishes.
        time.sleep(0.3)
        store = RunStore(run_dir)
        store.add_candidate("x = 1\n", "x = 1\n", 1, "n2", None, "late action", "improve", {})
        store.add_evaluation("c0004", 4, 1, "search", {"status": "passed", "score": 1.5})
        store.set_meta("evaluations_done", 5)
        time.sleep(0.3)
        store.set_meta("status", "holdout")  # still going: the best is re-measured on the holdout workloads
        time.sleep(0.3)
        store.set_meta("status", "finished")
        store.close()

    t = threading.Thread(target=writer)
    t.start()
    console = Console(record=True, width=120, force_terminal=False)
    final = watch(run_dir, console, interval=0.05)
    t.join()
    assert final.status == "finished"  # it did not stop at "holdout"
    assert final.evaluations_done == 5
    assert final.attempts[-1].score == 1.5


def test_a_run_at_its_end_says_it_times_its_best_again_then_judges_the_holdout(tmp_path: Path) -> None:
    from test_runs_cli import runs_cli

    run_dir = make_fake_run(tmp_path, "end", status="holdout")  # its config has no confirm_*: the best 3, twice
    store = RunStore(run_dir)
    store.add_evaluation("c0007", 12, 3, "confirm", {"status": "passed", "score": 1.3})
    store.close()

    def once() -> str:
        r = CliRunner().invoke(app, ["watch", str(run_dir), "--once"], env={"COLUMNS": "160"})
        assert r.exit_code == 0, r.output
        return " ".join(r.output.split())

    out = once()
    assert "mlx-cpu timing best again (the search has ended; its best are timed again to choose its result)" in out
    assert "now timing its 3 best again, 2 times each, in turns: 1/6 evaluations" in out
    assert "current action" not in out and "unseen workloads" not in out  # its last search action is over
    assert "timing best again" in runs_cli(tmp_path, 400).stdout  # `ksearch runs`' status column
    store = RunStore(run_dir)
    store.set_meta("chosen_candidate", "c0007")  # the result taken (run_end.take_result): the holdout next
    store.close()
    out = once()
    assert "mlx-cpu holdout (judging the run's result on unseen workloads)" in out
    assert "now the holdout evaluation of c0007 (best.py)" in out and "current action" not in out


def test_an_ended_run_shows_its_final_state_not_a_current_action(tmp_path: Path) -> None:
    for status in ("finished", "stopped"):
        run_dir = make_fake_run(tmp_path, status, status=status)
        r = CliRunner().invoke(app, ["watch", str(run_dir), "--once"], env={"COLUMNS": "120"})
        assert r.exit_code == 0, r.output
        out = " ".join(r.output.split())
        assert "current action" not in out and f"final state {status}" in out
        assert "result c0007 (best.py), holdout 1.250 (passed)" in out
        # A run cut short says what it was working on; a finished one was working on nothing.
        assert ("stopped while on Multiply by the reciprocal of the sum" in out) == (status == "stopped")
