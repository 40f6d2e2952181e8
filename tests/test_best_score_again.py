"""The best candidate's search workloads timed again in its holdout evaluation: what `ksearch run`, `ksearch report`
and `bench search-summary` show beside the best score, which is the highest of a search's measurements and leans
high."""

from __future__ import annotations

import pytest

from ksearch.harness.result import EvalResult, WorkloadResult


def _holdout(status: str, search: list[float], held: list[float]) -> EvalResult:
    return EvalResult(status=status, workloads=[WorkloadResult(f"s{i}", "search", speedup=v) for i, v in
                                                enumerate(search)]
                      + [WorkloadResult(f"h{i}", "holdout", speedup=v) for i, v in enumerate(held)])


def test_the_search_workloads_timed_again_are_their_geometric_mean() -> None:
    assert _holdout("passed", [2.0, 0.5], [3.0]).search_score_again() == pytest.approx(1.0)
    assert _holdout("passed", [0.9, None, 0.9], []).search_score_again() == pytest.approx(0.9)  # type: ignore[list-item]


@pytest.mark.parametrize("result", [_holdout("wrong_answer", [2.0], [1.0]), _holdout("passed", [], [1.25])])
def test_none_where_the_holdout_evaluation_failed_or_timed_no_search_workload(result: EvalResult) -> None:
    assert result.search_score_again() is None
