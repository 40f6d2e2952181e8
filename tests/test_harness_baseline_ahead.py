"""The baseline's worker spawned ahead on a first evaluation (Baselines.spawn_ahead): its start overlaps the
candidate's, it is readied before the candidate's first timed call, it times the baseline after the candidate is
gone, it waits out a candidate that fails, a dead one is replaced, and the evaluator closes it."""

from __future__ import annotations

from typing import Any

import pytest
from test_harness_containment import HONEST  # an honest softmax candidate

from ksearch.backends import get_backend
from ksearch.harness import EvalOptions, Evaluator, process
from ksearch.harness import baselines as baselines_module
from ksearch.harness import evaluator as evaluator_module
from ksearch.harness.baselines import Baselines
from ksearch.tasks import get_task


@pytest.fixture
def starts(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The role of every baseline worker started the ordinary way (spawned and initialised on the spot)."""
    roles: list[str] = []

    def recording(role: str, *args: Any, **kwargs: Any) -> Any:
        roles.append(role)
        return process.start(role, *args, **kwargs)

    monkeypatch.setattr(baselines_module, "start", recording)
    return roles


def _opts() -> EvalOptions:
    task = get_task("softmax")
    return EvalOptions(workloads=[task.select_workloads("cpu")[0].name], lint=False)


def test_a_first_evaluation_times_its_baseline_in_the_worker_spawned_ahead(starts: list[str],
                                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    events: list[str] = []
    ready, timed = Baselines.ready_ahead, evaluator_module.time_workload

    def ready_then_note(self: Baselines, deadline: float) -> None:
        ready(self, deadline)
        events.append(f"readied {len(self._ready)}, spawned {len(self._spawned)}")

    def note_then_time(*args: Any, **kwargs: Any) -> Any:
        events.append("candidate timed")
        return timed(*args, **kwargs)

    monkeypatch.setattr(Baselines, "ready_ahead", ready_then_note)
    monkeypatch.setattr(evaluator_module, "time_workload", note_then_time)
    with Evaluator(get_task("softmax"), get_backend("mlx-cpu")) as ev:
        first = ev.evaluate(HONEST, _opts())
        assert first.status == "passed", first.message
        assert first.workloads[0].baseline_latency_s
        assert starts == []  # the worker spawned ahead timed the baseline
        assert events[:2] == ["readied 1, spawned 0", "candidate timed"]  # its start finished before any timed call
        assert not ev.baselines._spawned and not ev.baselines._ready  # used once, then closed
        second = ev.evaluate(HONEST + "\n# another candidate\n", _opts())
        assert second.status == "passed", second.message
        assert starts == [] and events[2] == "readied 0, spawned 0"  # the baseline is known: nothing spawned ahead


def test_a_worker_spawned_ahead_waits_out_a_failed_candidate_and_a_dead_one_is_replaced(starts: list[str]) -> None:
    with Evaluator(get_task("softmax"), get_backend("mlx-cpu")) as ev:
        bad = ev.evaluate("raise RuntimeError('fails at import')\n", _opts())
        assert bad.status == "compile_error", bad.message
        (waiting,) = ev.baselines._spawned.values()  # never readied: the candidate had no timed call
        assert waiting.proc.poll() is None
        waiting.kill()
        waiting.proc.wait(10)
        ok = ev.evaluate(HONEST, _opts())
        assert ok.status == "passed", ok.message
        assert ok.workloads[0].baseline_latency_s
        assert starts == ["baseline"]  # the dead one was dropped and the baseline started its own worker
    with Evaluator(get_task("softmax"), get_backend("mlx-cpu")) as ev:
        assert ev.evaluate("raise RuntimeError('fails at import')\n", _opts()).status == "compile_error"
        (waiting,) = ev.baselines._spawned.values()
    assert waiting.proc.poll() is not None  # closing the evaluator ends it
