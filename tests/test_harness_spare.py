"""The next candidate's worker spawned ahead (Evaluator(spare=True), as a search judges): used when it fits, replaced
when it died or was spawned for other options, closed with the evaluator; never shared by two candidates."""

from __future__ import annotations

from typing import Any

import pytest
from test_harness_containment import HONEST  # an honest softmax candidate

from ksearch.harness import EvalOptions, Evaluator, process
from ksearch.harness import evaluator as evaluator_module
from ksearch.tasks import get_task


@pytest.fixture
def judged(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The pid of every worker a candidate was loaded into."""
    pids: list[int] = []

    def recording(w: Any, *args: Any, **kwargs: Any) -> Any:
        pids.append(w.proc.pid)
        return process.initialise(w, *args, **kwargs)

    monkeypatch.setattr(evaluator_module, "initialise", recording)
    return pids


def _opts(**kw: Any) -> EvalOptions:
    task = get_task("softmax")
    return EvalOptions(workloads=[task.select_workloads("cpu")[0].name], lint=False, **kw)


def test_the_spare_judges_the_next_candidate_and_a_new_one_waits_after_it(judged: list[int]) -> None:
    from ksearch.backends import get_backend

    with Evaluator(get_task("softmax"), get_backend("mlx-cpu"), spare=True) as ev:
        first = ev.evaluate(HONEST, _opts())
        assert first.status == "passed", first.message
        assert ev._spare is not None
        spare_pid = ev._spare[1].proc.pid
        second = ev.evaluate(HONEST + "\n# another candidate\n", _opts())
        assert second.status == "passed", second.message
        assert judged == [judged[0], spare_pid] and judged[0] != spare_pid
        assert ev._spare is not None and ev._spare[1].proc.pid not in judged  # a fresh process for every candidate
        last = ev._spare[1]
    assert last.proc.poll() is not None  # closing the evaluator ends the spare too


def test_a_dead_spare_or_one_for_other_options_is_replaced(judged: list[int]) -> None:
    from ksearch.backends import get_backend

    with Evaluator(get_task("softmax"), get_backend("mlx-cpu"), spare=True) as ev:
        assert ev.evaluate(HONEST, _opts()).status == "passed"
        assert ev._spare is not None
        dead = ev._spare[1]
        dead.kill()
        dead.proc.wait(10)
        assert ev.evaluate(HONEST, _opts()).status == "passed"
        assert dead.proc.pid not in judged[1:]
        assert ev._spare is not None
        other = ev._spare[1]
        result = ev.evaluate(HONEST, _opts(extra_env={"KSEARCH_TEST_MARK": "1"}))
        assert result.status == "passed", result.message
        assert other.proc.pid not in judged and other.proc.poll() is not None


def test_without_spare_nothing_is_spawned_ahead() -> None:
    from ksearch.backends import get_backend

    with Evaluator(get_task("softmax"), get_backend("mlx-cpu")) as ev:
        assert ev.evaluate(HONEST, _opts()).status == "passed"
        assert ev._spare is None
