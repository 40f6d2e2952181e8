"""GPU checks of the foundation (marker `gpu`: skipped in CI, run on the H200 with mlx-cuda).

Every task's naive CUDA starter must pass on its first GPU search workload, and a CUDA kernel that writes nothing
must fail even right after an evaluation that left a correct answer in a freed buffer.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from ksearch.harness import EvalOptions, Evaluator, evaluate
from ksearch.tasks import builtin_names, get_task

pytestmark = pytest.mark.gpu

STARTERS = Path(__file__).parents[1] / "src" / "ksearch" / "tasks" / "starters"
CANDIDATES = Path(__file__).parent / "candidates"
CUDA_TASKS = sorted(p.stem.removesuffix("_cuda") for p in STARTERS.glob("*_cuda.py"))


@pytest.fixture(scope="module")
def cuda_backend():
    from ksearch.backends import BackendUnavailable, get_backend

    try:
        return get_backend("mlx-cuda")
    except BackendUnavailable as exc:
        pytest.skip(f"mlx-cuda is not available here: {exc}")


def first_gpu_workload(task_name: str) -> str:
    task = get_task(task_name)
    return task.select_workloads("gpu")[0].name


@pytest.mark.parametrize("task_name", CUDA_TASKS)
def test_naive_cuda_starter_passes(cuda_backend, task_name):
    if task_name not in builtin_names():
        pytest.skip(f"{task_name}_cuda.py has no built-in task yet")
    task = get_task(task_name)
    options = EvalOptions(workloads=[first_gpu_workload(task_name)], timeout_s=600)
    result = evaluate(task, task.starting_source("cuda"), cuda_backend, options)
    assert result.status == "passed", result.message
    (w,) = result.workloads
    assert w.latency_s and w.latency_s > 0
    assert w.baseline_latency_s and w.baseline_latency_s > 0
    assert result.score > 0


def test_kernel_writing_nothing_fails_after_a_correct_answer(cuda_backend):
    task = get_task("softmax")
    options = EvalOptions(workloads=[first_gpu_workload("softmax")], timeout_s=600)
    with Evaluator(task, cuda_backend) as ev:
        good = ev.evaluate(task.starting_source("cuda"), options)
        assert good.status == "passed", good.message
        bad = ev.evaluate((CANDIDATES / "cuda_write_nothing.py").read_text(), options)
    assert bad.status == "wrong_answer", bad.message



def test_kernel_writing_nothing_fails_on_its_own(cuda_backend):
    task = get_task("softmax")
    options = EvalOptions(workloads=[first_gpu_workload("softmax")], timeout_s=600)
    result = evaluate(task, (CANDIDATES / "cuda_write_nothing.py").read_text(), cuda_backend, options)
    assert result.status == "wrong_answer", result.message
