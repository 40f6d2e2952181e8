"""`ksearch confirm`: a finished run's best candidates timed again in turns, the pick by median, confirm.json."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from ksearch.config import RunConfig
from ksearch.errors import RunError
from ksearch.harness.result import EvalResult, WorkloadResult
from ksearch.search.confirm import (
    CONFIRM_FILE,
    LATER_FILE,
    confirm_at_end,
    confirm_run,
    confirmations,
    own_counts,
    top_candidates,
)
from ksearch.search.judge import run_judge
from ksearch.search.run_end import check_again
from ksearch.search.start import start_run
from ksearch.search.state import LoopState
from ksearch.store import RunReader, RunStore
from ksearch.store.owner import current_owner
from ksearch.store.records import EvaluationRow

sys.path.insert(0, str(Path(__file__).parent))
from test_search_loop import scripted_judge  # noqa: E402
from test_start import recorded_run as _scripted_run  # noqa: E402


@pytest.fixture(scope="module")
def real_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A finished offline search judged for real on the CPU (three evaluations of softmax)."""
    base = tmp_path_factory.mktemp("runs")
    out = start_run(RunConfig(task="softmax", backend="mlx-cpu", budget=3, runs_dir=str(base), seed=1,
                              confirm_top=2, confirm_times=1))
    assert out.confirmation is not None
    return out.path


def _row(cid: str, score: float, status: str = "passed", kind: str = "search", device: str | None = None,
         i: int = 0) -> EvaluationRow:
    env = {"evaluator": {"device_kind": device}} if device else {}
    return EvaluationRow(i, cid, i, 0.0, 0, kind, status, score, None, None, None, {"environment": env})


def _result(score: float, status: str = "passed") -> EvalResult:
    r = EvalResult(status=status, task="softmax", backend="mlx-cpu", baseline="native",  # type: ignore[arg-type]
                   score=score if status == "passed" else 0.0)
    r.workloads = [WorkloadResult(name="w", speedup=score, latency_s=1e-3, baseline_latency_s=score * 1e-3)]
    return r


def test_the_real_judge_times_the_runs_best_again_beside_its_own_confirmation(real_run: Path) -> None:
    seen: list[tuple[str, str]] = []
    own = (real_run / CONFIRM_FILE).read_text()  # its end's
    with RunReader(real_run) as reader:
        before = len(reader.evaluations("confirm"))
    judge = run_judge(real_run)
    try:
        check = check_again(real_run, 2, 2, judge, None, adopt=False,
                            on_result=lambda item, r: seen.append((item.candidate, r.status)))
    finally:
        judge.close()
    out = check.confirmation
    with RunReader(real_run) as reader:
        passed = {e.candidate_id for e in reader.evaluations("search") if e.status == "passed"}
        meta = reader.meta()
        recorded = reader.evaluations("confirm")[before:]
    assert len(out.candidates) == min(2, len(passed)) and out.candidates[0].candidate == meta.get("best_candidate")
    assert [s for _, s in seen] == ["passed"] * 2 * len(out.candidates)  # every candidate twice, all passed
    assert all(len(c.scores) == 2 and all(x > 0 for x in c.scores) for c in out.candidates)
    # each verdict kept in the run, in turns
    assert [e.candidate_id for e in recorded] == [c.candidate for c in out.candidates] * 2
    assert sorted(e.score for e in recorded) == sorted(x for c in out.candidates for x in c.scores)
    pick = out.pick
    assert pick is not None and pick.median == max(c.median or 0 for c in out.candidates)
    assert check.written == real_run / LATER_FILE and not check.adopted
    assert check.result == meta.get("chosen_candidate")
    written = json.loads((real_run / LATER_FILE).read_text())
    assert written["pick"] == pick.candidate and written["times"] == 2 and len(written["candidates"]) == 2
    assert written["by"] == "ksearch confirm"
    assert written["machine"]["backend"] == "mlx-cpu" and written["machine"]["mlx"]  # whose numbers these are
    assert "containment" not in written["machine"] and re.fullmatch(r"\d{4}-\d\d-\d\dT[\d:]{8}Z", written["date"])
    assert (real_run / CONFIRM_FILE).read_text() == own  # the confirmation that chose the run's result stays
    assert not list(real_run.glob("*.tmp"))  # written whole


def test_candidates_are_timed_in_turns_and_one_that_fails_again_is_not_picked(tmp_path: Path) -> None:
    run = _scripted_run(tmp_path)
    with RunReader(run) as reader:
        sources = {c.id: c.source(reader.path) for c in reader.candidates()}
    order: list[str] = []
    ids = {v: k for k, v in sources.items()}
    scores = iter([2.0, 1.5, 3.0, 1.6, 2.1, 1.4])  # the first candidate fails its second turn

    def judge(source: str) -> EvalResult:
        order.append(ids[source])
        score = next(scores)
        return _result(score, "runtime_error" if score == 3.0 else "passed")

    out = confirm_run(run, top=2, times=3, evaluate=judge)
    first, second = (c.candidate for c in out.candidates)
    assert order == [first, second] * 3
    assert out.candidates[0].median is None and out.candidates[0].statuses[1] == "runtime_error"
    assert out.pick is out.candidates[1] and out.candidates[1].median == 1.5


def test_top_candidates_ranks_passed_search_scores_on_the_best_s_device_kind() -> None:
    rows = [_row("c1", 1.2, device="h100"), _row("c2", 1.9, device="h200"), _row("c3", 1.5, device="h100"),
            _row("c4", 2.5, status="wrong_answer", device="h100"), _row("c5", 3.0, kind="holdout", device="h100"),
            _row("c3", 1.1, device="h100")]
    assert top_candidates(rows, "c1", 5) == [("c3", 1.5), ("c1", 1.2)]  # h200's c2 is not comparable
    assert top_candidates(rows, "c2", 5) == [("c2", 1.9)]
    assert top_candidates(rows, "c1", 1) == [("c3", 1.5)]
    assert top_candidates([_row("a", 1.0), _row("b", 1.0)], "a", 2) == [("a", 1.0), ("b", 1.0)]  # ties by id


def test_a_run_still_being_searched_is_refused(tmp_path: Path) -> None:
    run = _scripted_run(tmp_path)
    store = RunStore(run)
    store.set_meta("status", "running")
    store.set_meta("owner", current_owner())  # this live process
    store.close()
    with pytest.raises(RunError, match="still being searched"):
        check_again(run, 1, 1, scripted_judge, None, adopt=False)
    assert not (run / CONFIRM_FILE).exists() and not (run / LATER_FILE).exists()
    with RunReader(run) as reader:
        assert reader.evaluations("confirm") == []


def test_a_run_without_a_passed_candidate_and_bad_counts_are_refused(tmp_path: Path) -> None:
    run = _scripted_run(tmp_path)
    with pytest.raises(RunError, match="1 or more"):
        confirm_run(run, top=0, times=1, evaluate=scripted_judge)
    store = RunStore(run)
    store.db.execute("UPDATE evaluations SET status = 'wrong_answer'")
    store.db.commit()
    store.close()
    with pytest.raises(RunError, match="no passed candidate"):
        confirm_run(run, top=1, times=1, evaluate=scripted_judge)


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "ksearch.cli", "confirm", *args], capture_output=True, text=True,
                          timeout=300)


def test_the_command_prints_one_json_object_and_refuses_bad_input_in_one_line(real_run: Path) -> None:
    res = _cli(str(real_run), "--top", "1", "--times", "1", "--json")
    assert res.returncode == 0, res.stderr
    out: dict[str, Any] = json.loads(res.stdout)
    assert out["pick"] == out["candidates"][0]["candidate"] and len(out["candidates"][0]["scores"]) == 1
    for args, message in (([str(real_run), "--top", "0"], "--top and --times take 1 or more"),
                          ([str(real_run.parent / "no-such-run")], "no-such-run"),
                          ([str(real_run), "--workers", "0"], "--workers takes 1 or more"),
                          ([str(real_run), "--ray-address", "nope"], "is not auto or HOST:PORT")):
        res = _cli(*args)
        assert res.returncode == 2 and message in res.stderr and len(res.stderr.strip().splitlines()) == 1


def test_the_table_names_the_pick(real_run: Path) -> None:
    res = _cli(str(real_run), "--top", "2", "--times", "1")
    assert res.returncode == 0, res.stderr
    assert "(pick)" in res.stdout and re.search(r"pick: c\d+ at [\d.]+x \(median\)", res.stdout)
    assert "passed" in res.stderr  # each evaluation reported as it arrives


def _headline(run: Path) -> dict[str, str]:
    from ksearch.report.rundata import load_run
    from ksearch.report.summary import headline

    return dict(headline(load_run(run)))


def _end(run: Path) -> None:
    """The run's end timing its best two again, once each (search.confirm.confirm_at_end)."""
    store = RunStore(run)
    final = LoopState.from_json(store.get_state("loop_state"))
    confirm_at_end(store, RunConfig(task="softmax", backend="mlx-cpu", confirm_top=2, confirm_times=1),
                   scripted_judge, final, None)
    store.set_meta("status", "finished")
    store.close()


def test_the_report_shows_the_runs_confirmation_and_a_later_check_beside_it(tmp_path: Path) -> None:
    run = _scripted_run(tmp_path)
    rows = _headline(run)
    assert "timed again" not in rows and "timed again later" not in rows  # not confirmed: no row
    check = check_again(run, 2, 1, scripted_judge, None, adopt=False)
    rows = _headline(run)
    pick, result = check.confirmation.pick, rows["best candidate"].split()[0]
    assert pick is not None and "timed again" not in rows  # no confirmation chose the run's result
    assert rows["timed again later"] == (f"{pick.candidate} at 1.000 (median; its 2 best 1 times each, in turns "
                                         f"(ksearch confirm, not adopted); the run's result stays {result})")
    _end(run)  # the run's end (a resumed run's): the check before it is no longer later
    rows = _headline(run)
    assert rows["timed again"].endswith("in turns (the run's end))") and "timed again later" not in rows
    check_again(run, 2, 1, scripted_judge, None, adopt=False)
    rows = _headline(run)
    assert rows["timed again"].endswith("(the run's end))") and "(ksearch confirm, not adopted)" in rows[
        "timed again later"]
    (run / LATER_FILE).write_text("{not json")
    assert "timed again later" not in _headline(run)
    (run / CONFIRM_FILE).write_text("{not json")  # the run's meta keeps its confirmation
    assert _headline(run)["timed again"].endswith("(the run's end))")


def test_a_confirm_not_adopted_leaves_the_runs_pick_in_every_view(real_run: Path, tmp_path: Path) -> None:
    import shutil

    from ksearch.report.export import module_text
    from ksearch.report.rundata import load_run

    run = tmp_path / "runs" / real_run.name
    shutil.copytree(real_run, run)
    (run / LATER_FILE).unlink(missing_ok=True)
    data = load_run(run)
    own, pick = (run / CONFIRM_FILE).read_text(), data.chosen_candidate
    header = [ln for ln in module_text(data).splitlines() if ln.startswith("#   timed again:")]
    runs_row = _runs_row(run)
    with RunReader(run) as reader:
        before = len(reader.evaluations("confirm"))
    res = _cli(str(run), "--top", "2", "--times", "1")
    assert res.returncode == 0, res.stderr
    assert f"written: {run / LATER_FILE}" in " ".join(res.stdout.split()) and "the run's result" in res.stdout
    assert (run / CONFIRM_FILE).read_text() == own and json.loads((run / LATER_FILE).read_text())["beside"]
    data = load_run(run)
    assert data.chosen_candidate == pick and data.confirmation() == json.loads(own)
    assert [ln for ln in module_text(data).splitlines() if ln.startswith("#   timed again:")] == header != []
    assert _runs_row(run) == runs_row  # the pick (median) column is still the end's
    rows = _headline(run)
    assert rows["timed again"].endswith("(the run's end))") and "not adopted" in rows["timed again later"]
    # the new verdicts are the run's evaluations, listed by `report --evaluations`
    evals = subprocess.run([sys.executable, "-m", "ksearch.cli", "report", str(run), "--evaluations", "--json"],
                           capture_output=True, text=True, timeout=120)
    kinds = [e["kind"] for e in json.loads(evals.stdout)["evaluations"]]
    assert kinds.count("confirm") == before + 2 and kinds[-2:] == ["confirm", "confirm"]


def _runs_row(run: Path) -> str:
    res = subprocess.run([sys.executable, "-m", "ksearch.cli", "runs", "--runs-dir", str(run.parent)],
                         capture_output=True, text=True, timeout=120, env={**os.environ, "COLUMNS": "400"})
    return next(line for line in res.stdout.splitlines() if run.name in line)


def test_an_older_confirm_json_reads_as_what_it_was(tmp_path: Path) -> None:
    end = {"by": "the run's end", "date": "2026-12-06T10:00:00Z", "pick": "c0001", "pick_median": 1.2, "times": 2,
           "candidates": [{"candidate": "c0001"}, {"candidate": "c0002"}]}
    later = {**end, "by": "ksearch confirm", "date": "2026-12-06T11:00:00Z", "pick": "c0002"}
    old = {k: v for k, v in later.items() if k != "by"}
    (tmp_path / CONFIRM_FILE).write_text(json.dumps(old))
    # a single confirm.json naming no writer, no confirmation in the meta: the run's, as it always read
    assert confirmations(tmp_path, {}) == (old, None)
    # written over the end's by a `ksearch confirm` not adopted: the end's (in the meta) stays the run's
    for written in (old, later):
        (tmp_path / CONFIRM_FILE).write_text(json.dumps(written))
        assert confirmations(tmp_path, {"confirmation": end, "chosen_candidate": "c0001"}) == (end, written)
        # adopted: its pick is the run's result
        assert confirmations(tmp_path, {"confirmation": end, "chosen_candidate": "c0002"}) == (written, None)


def test_confirm_times_as_many_as_the_runs_own_end_by_default(real_run: Path, tmp_path: Path) -> None:
    assert own_counts({"confirm_top": 2, "confirm_times": 1}) == (2, 1)
    assert own_counts({"confirm_top": 0, "confirm_times": 4}) == (3, 4)  # its end timed none: the best 3
    assert own_counts(None) == own_counts({}) == (3, 2)
    res = _cli(str(real_run), "--json")  # the run's end timed its best 2 once each
    assert res.returncode == 0, res.stderr
    out = json.loads(res.stdout)
    assert out["times"] == 1 and len(out["candidates"]) == 2 and all(len(c["scores"]) == 1 for c in out["candidates"])
    helped = subprocess.run([sys.executable, "-m", "ksearch.cli", "confirm", "--help"], capture_output=True,
                            text=True, timeout=120, env={**os.environ, "COLUMNS": "200"})
    assert "the run's own confirm_top" in helped.stdout and "the run's own confirm_times" in helped.stdout


def test_a_finished_run_times_its_best_again_at_its_end(real_run: Path) -> None:
    with RunReader(real_run) as reader:
        end = reader.events("run_end")
        rows = [r for r in reader.evaluations(kind="confirm") if r.created_at <= end[0].created_at]  # its end's
        meta = reader.meta()
    confirmation = meta.get("confirmation")
    # its best two, once each, by the run's own judge, before the run was marked finished
    assert len(rows) == 2 and {r.candidate_id for r in rows} == {c["candidate"] for c in confirmation["candidates"]}
    assert confirmation["times"] == 1 and confirmation["pick"] in {r.candidate_id for r in rows}
    assert confirmation["by"] == "the run's end"  # the report names it so, not as `ksearch confirm`
    assert meta.get("status") == "finished" and len(end) == 1
    assert rows[-1].created_at <= end[0].created_at
    # the pick is the run's result: best.py holds it and the holdout, after the confirmation, judged it
    pick = confirmation["pick"]
    with RunReader(real_run) as reader:
        holdout = reader.evaluations(kind="holdout")
        sources = {c.id: c.source(reader.path) for c in reader.candidates()}
    assert meta.get("chosen_candidate") == pick and (real_run / "best.py").read_text() == sources[pick]
    assert [h.candidate_id for h in holdout] == [pick] and holdout[0].created_at >= rows[-1].created_at


def test_confirm_settings_are_checked_and_zero_leaves_it_out(tmp_path: Path) -> None:
    from ksearch.config import load_config
    from ksearch.errors import ConfigError

    for bad in ({"confirm_top": -1}, {"confirm_times": 0}):
        with pytest.raises(ConfigError, match="confirm_top"):
            load_config(overrides=bad, environ={})
    assert load_config(environ={"KSEARCH_CONFIRM_TOP": "0"}).confirm_top == 0
    run = start_run(RunConfig(task="softmax", backend="mlx-cpu", budget=2, runs_dir=str(tmp_path), seed=1,
                              confirm_top=0))
    assert run.confirmation is None and not (run.path / CONFIRM_FILE).exists()


def test_adopt_takes_the_pick_as_the_runs_result_and_judges_its_holdout_again(real_run: Path,
                                                                              tmp_path: Path) -> None:
    import shutil

    run = tmp_path / real_run.name
    shutil.copytree(real_run, run)  # the module's run stays as its end left it
    assert _cli(str(run), "--top", "2", "--times", "1").returncode == 0  # a check not adopted first
    with RunReader(run) as reader:
        held_before = len(reader.evaluations(kind="holdout"))
    res = _cli(str(run), "--top", "1", "--times", "1", "--adopt", "--json")
    assert res.returncode == 0, res.stderr
    out = json.loads(res.stdout)
    pick = out["pick"]
    assert pick and out["adopted"]["candidate"] == pick and out["adopted"]["holdout"]["status"] == "passed"
    assert out["written"] == str(run / CONFIRM_FILE) and out["by"] == "ksearch confirm --adopt"
    with RunReader(run) as reader:
        meta = reader.meta()
        holdout = reader.evaluations(kind="holdout")
        source = next(c for c in reader.candidates() if c.id == pick).source(reader.path)
    assert meta.get("chosen_candidate") == pick and meta.get("status") == "finished"
    assert len(holdout) == held_before + 1 and holdout[-1].candidate_id == pick
    assert (run / "best.py").read_text() == source
    # this confirmation is the run's now; the check made beside the end's is no longer shown as later
    written = json.loads((run / CONFIRM_FILE).read_text())
    assert meta.get("confirmation") == written == confirmations(run, meta.values)[0]
    rows = _headline(run)
    assert rows["timed again"].endswith("in turns (ksearch confirm --adopt))") and "timed again later" not in rows
