"""A finished run's end (search/run_end.py): the confirmation's pick becomes the run's result (best.py, the holdout,
export, the report), the search's best keeps its own record, and a resume searches from the search's best again."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from ksearch.config import RunConfig
from ksearch.harness.result import EvalResult, WorkloadResult
from ksearch.report.export import module_text
from ksearch.report.rundata import load_run
from ksearch.report.summary import headline, workload_rows
from ksearch.search.run_end import CHOSEN, judge_end, reopen
from ksearch.search.state import LoopState
from ksearch.store import RunStore, list_runs

sys.path.insert(0, str(Path(__file__).parent))
from test_start import recorded_run  # noqa: E402


def _verdict(score: float, holdout: float | None = None) -> EvalResult:
    r = EvalResult(status="passed", task="softmax", backend="mlx-cpu", baseline="native", score=score,
                   holdout_score=holdout)
    r.workloads = [WorkloadResult(name="w", split="search", speedup=score, latency_s=1e-3,
                                  baseline_latency_s=score * 1e-3)]
    if holdout is not None:
        r.workloads.append(WorkloadResult(name="h", split="holdout", speedup=holdout, latency_s=1e-3,
                                          baseline_latency_s=holdout * 1e-3))
    return r


def _ended(tmp_path: Path, confirm_top: int) -> tuple[Path, str, str, list[str]]:
    """A scripted run ended again by judge_end: a timed-again judge that favours any candidate but the search's best,
    and a holdout judge recording what it was handed. Returns the run, its search best, the pick and the sources the
    holdout judged."""
    run = recorded_run(tmp_path)
    store = RunStore(run)
    final = LoopState.from_json(store.get_state("loop_state"))
    best = final.best_candidate
    assert best is not None
    best_source = store.candidate(best).source(store.path)
    judged: list[str] = []

    def holdout(source: str) -> EvalResult:
        judged.append(source)
        return _verdict(1.1, holdout=0.9)

    cfg = RunConfig(task="softmax", backend="mlx-cpu", confirm_top=confirm_top, confirm_times=3)
    confirmation, verdict = judge_end(store, cfg, final,
                                      lambda source: _verdict(1.0 if source == best_source else 1.3), holdout, None)
    assert verdict is not None and (confirmation is None) == (confirm_top == 0)
    chosen = store.get_meta(CHOSEN)
    store.close()
    return run, best, chosen, judged


def test_the_pick_is_the_runs_result_and_the_holdout_judges_it(tmp_path: Path) -> None:
    run, best, pick, judged = _ended(tmp_path, confirm_top=2)
    assert pick != best  # timed again, another candidate came out ahead of the search's best
    store = RunStore(run)
    pick_source = store.candidate(pick).source(store.path)
    holdout_rows = store.evaluations("holdout")
    assert (run / "best.py").read_text() == pick_source and judged == [pick_source]
    assert holdout_rows[-1]["candidate_id"] == pick and store.get_meta("best_candidate") == best  # its own record
    store.close()
    data = load_run(run)
    assert data.chosen_candidate == pick and data.best_candidate == best and data.holdout_candidate == pick
    rows = dict(headline(data))
    assert rows["best candidate"].startswith(best) and rows["the run's pick"].startswith(f"{pick} (best.py")
    assert rows["pick re-measured"].startswith("1.100") and rows["holdout score"] == f"0.900 (passed) ({pick})"
    assert {r["workload"] for r in workload_rows(data)} == {"w", "h"}
    text = module_text(data)
    assert f"#   candidate: {pick}" in text and "#   timed again: median 1.3000 over 3 new evaluations" in text
    assert text.endswith(pick_source)


def test_without_a_confirmation_the_search_best_is_the_result(tmp_path: Path) -> None:
    run, best, chosen, judged = _ended(tmp_path, confirm_top=0)
    store = RunStore(run)
    best_source = store.candidate(best).source(store.path)
    store.close()
    assert chosen == best and judged == [best_source] and (run / "best.py").read_text() == best_source
    rows = dict(headline(load_run(run)))
    assert "the run's pick" not in rows and rows["best re-measured"].startswith("1.100")
    assert rows["holdout score"] == "0.900 (passed)"


def test_a_resume_clears_the_result_and_best_py_is_the_search_best_again(tmp_path: Path) -> None:
    run, best, pick, _ = _ended(tmp_path, confirm_top=2)
    store = RunStore(run)
    reopen(store, best)
    assert store.get_meta(CHOSEN) is None and store.get_meta("holdout") is None
    assert (run / "best.py").read_text() == store.candidate(best).source(store.path)
    assert [e["candidate_id"] for e in store.evaluations("holdout")] == [pick]  # the record keeps the old verdict
    store.close()
    data = load_run(run)
    assert data.chosen_candidate == best
    assert data.holdout_result() is None  # the old pick's verdict is not the search best's
    listed = next(r for r in list_runs(str(run.parent)) if r["id"] == run.name)
    assert listed.get("holdout") is None


def test_search_summary_names_the_result_and_the_holdout_candidate(tmp_path: Path) -> None:
    from ksearch.bench.search_summary import summarise_run

    run, best, pick, _ = _ended(tmp_path, confirm_top=2)
    summary = json.loads(summarise_run(str(run), out=tmp_path / "out").read_text())["summary"]
    assert (summary["best_candidate"], summary["chosen_candidate"], summary["holdout_candidate"]) == (best, pick, pick)
    assert summary["best_score_again"] == 1.1 and summary["holdout_score"] == 0.9


def test_the_final_table_names_the_pick_where_it_is_not_the_search_best(tmp_path: Path) -> None:
    from rich.console import Console

    from ksearch.cli.live import final_table
    from ksearch.search.start import RunOutcome

    state = LoopState(best_candidate="c0008", best_score=0.982)

    def text(chosen: str) -> str:
        best = _verdict(0.982).to_json()
        out = RunOutcome(tmp_path, state, _verdict(0.916, holdout=0.922), best, chosen=chosen)
        console = Console(width=200, record=True)
        console.print(final_table(out))
        return console.export_text()

    picked, same = text("c0004"), text("c0008")
    assert picked.index("  w ") < picked.index("the run's pick")  # the search's best's workloads under its score
    assert "the run's pick" in picked and f"c0004 ({tmp_path / 'best.py'}" in picked
    assert "pick re-measured" in picked and "0.922x (passed, c0004)" in picked
    assert "the run's pick" not in same and f"c0008 ({tmp_path / 'best.py'})" in same
    assert "best re-measured" in same and "0.922x (passed)" in same


def test_the_final_table_prints_best_py_whole_in_80_columns(tmp_path: Path) -> None:
    from rich.console import Console

    from ksearch.cli.live import final_table
    from ksearch.search.start import RunOutcome

    run = tmp_path / "runs" / "20261207-070357-selective_scan-53e8de"  # a path longer than its column
    state = LoopState(best_candidate="c0008", best_score=0.982)
    for chosen in ("c0004", "c0008"):  # the pick's row, and the best's where it is the pick
        console = Console(width=80, record=True)
        console.print(final_table(RunOutcome(run, state, _verdict(0.916, holdout=0.922), _verdict(0.982).to_json(),
                                             chosen=chosen)))
        text = console.export_text()
        cells = "".join(line.split("│")[2].strip() for line in text.splitlines() if line.count("│") == 3)
        assert "…" not in text and str(run / "best.py") in cells, text
