"""A run scored against the naive baseline opens with the starting kernel timed against itself: far from 1.0x, the
report says so."""

from __future__ import annotations

from pathlib import Path

import pytest

from ksearch.config import RunConfig
from ksearch.harness.result import EvalResult, WorkloadResult
from ksearch.report.rundata import load_run
from ksearch.report.start_check import start_check
from ksearch.report.summary import headline
from ksearch.search.start import RunOutcome, create_run, execute


def _run(base: Path, start_score: float, baseline: str = "naive") -> RunOutcome:
    def judge(source: str) -> EvalResult:
        # The offline proposer's candidates are scored 1.5x, the starting kernel as asked.
        score = 1.5 if source != starter else start_score
        r = EvalResult(status="passed", task="softmax", backend="mlx-cpu", baseline=baseline, score=score)
        r.workloads = [WorkloadResult(name="w", speedup=score, latency_s=1e-3, baseline_latency_s=score * 1e-3)]
        return r

    from ksearch.tasks import get_task

    starter = get_task("softmax").starting_source("cpu")
    cfg = RunConfig(task="softmax", backend="mlx-cpu", budget=3, runs_dir=str(base), seed=1)
    store, _, _ = create_run(cfg)
    outcome = execute(store, cfg, evaluate=judge)
    store.close()
    return outcome


def _final_table(outcome: RunOutcome) -> str:
    from rich.console import Console

    from ksearch.cli.live import final_table

    console = Console(width=300, record=True)
    console.print(final_table(outcome))
    return console.export_text()


@pytest.mark.parametrize("score", [1.985, 0.7])
def test_a_start_far_from_one_is_said_in_the_report(tmp_path: Path, score: float) -> None:
    outcome = _run(tmp_path, score)
    run = load_run(outcome.path)
    line = start_check(run)
    assert line is not None and f"{score:.3f}x" in line and "naive baseline's own code" in line
    assert ("timing check", line) in headline(run)
    assert "timing check" in _final_table(outcome)  # `ksearch run`'s last table says it too


@pytest.mark.parametrize(("score", "baseline"), [(1.2, "naive"), (0.85, "naive"), (1.985, "native")])
def test_a_start_near_one_or_against_another_baseline_says_nothing(tmp_path: Path, score: float,
                                                                   baseline: str) -> None:
    outcome = _run(tmp_path, score, baseline)
    run = load_run(outcome.path)
    assert start_check(run) is None
    assert all(label != "timing check" for label, _ in headline(run))
    assert "timing check" not in _final_table(outcome)
