"""References computed while the candidate runs its trials (Evaluator.prefetch_references): the same verdicts as
without, every reference the evaluation needs in the cache when timing starts, no thread or worker left behind, and a
reference that fails still fails the evaluation with its own message."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest

from ksearch.harness import EvalOptions, Evaluator
from ksearch.harness.evaluate import TRIALS
from ksearch.tasks import get_task
from ksearch.tasks.base import read_starter

CANDIDATES = Path(__file__).parent / "candidates"


def _options(task: Any) -> EvalOptions:
    return EvalOptions(workloads=[w.name for w in task.select_workloads("cpu")[:2]], timeout_s=120, seed=7)


def _prefetchers() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "ksearch-reference-prefetch"]


@pytest.mark.parametrize("prefetch", [True, False])
def test_verdicts_are_the_same_with_and_without_prefetch(cpu_backend: Any, prefetch: bool) -> None:
    task = get_task("softmax")
    with Evaluator(task, cpu_backend) as ev:
        ev.prefetch_references = prefetch
        honest = ev.evaluate(read_starter("softmax_cpu.py"), _options(task))
        assert honest.status == "passed", honest.message
        # Every trial's and every post-timing check's reference is cached (computed once, by whichever thread).
        want = {(w.name, s, 0) for w in task.select_workloads("cpu")[:2] for s in honest.seeds[w.name]}
        assert want <= set(ev._ref_cache)
        assert len(honest.seeds[task.select_workloads("cpu")[0].name]) > TRIALS
        wrong = ev.evaluate((CANDIDATES / "nan_output.py").read_text(), _options(task))
        assert wrong.status == "wrong_answer"
        broken = ev.evaluate((CANDIDATES / "syntax_error.py").read_text(), _options(task))
        assert broken.status == "compile_error"
        assert ev._ref is not None and ev._ref.proc.poll() is None  # the reference worker survives them all
    assert not _prefetchers()


def test_a_failing_reference_still_fails_the_evaluation(cpu_backend: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    task = get_task("softmax")
    calls: list[str] = []

    def broken(self: Evaluator, workload: Any, seed: int, shift: int) -> Any:
        calls.append(threading.current_thread().name)
        raise RuntimeError(f"the task's reference failed on {workload.name}: boom")

    monkeypatch.setattr(Evaluator, "_reference", broken)
    with Evaluator(task, cpu_backend) as ev, pytest.raises(RuntimeError, match="boom"):
        ev.evaluate(read_starter("softmax_cpu.py"), _options(task))
    assert "ksearch-reference-prefetch" in calls  # the prefetch tried, gave up quietly...
    assert "MainThread" in calls  # ...and the judging thread's own request raised
    assert not _prefetchers()
