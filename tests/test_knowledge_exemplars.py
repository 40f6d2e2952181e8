"""Every kernel exemplar of the knowledge base, checked as a full candidate of its micro-task.

CPU: each CUDA exemplar lints clean on mlx-cuda and compiles with nvcc -arch=sm_90a for fp32 and fp16; each Metal
exemplar lints clean on mlx-metal and passes the clang MSL check. GPU (marker gpu, run on an H200): each CUDA
exemplar is judged by the real harness on its micro-task and must pass (correct output, not only compiling).
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest

from ksearch.backends.nvcc import nvcc_path
from ksearch.knowledge import load_patterns
from ksearch.knowledge.cuda_check import compile_kernels
from ksearch.knowledge.extract import find_kernels
from ksearch.knowledge.lint import check_cuda_candidate, check_metal_candidate, lint_source
from ksearch.knowledge.metal_check import clang_path

DATA = Path(__file__).parent / "data" / "cuda"
sys.path.insert(0, str(DATA))

from exemplar_candidates import LAUNCHES, candidate  # noqa: E402
from micro_tasks import make  # noqa: E402

GPU_PATTERNS = sorted(p["id"] for p in load_patterns() if "cuda" in p["exemplars"] or "metal" in p["exemplars"])


def _body(pattern: str, dialect: str) -> str:
    return next(p for p in load_patterns() if p["id"] == pattern)["exemplars"][dialect]


def test_every_kernel_exemplar_has_a_launch_and_both_dialects() -> None:
    assert set(GPU_PATTERNS) == set(LAUNCHES)
    for pid in GPU_PATTERNS:
        assert _body(pid, "cuda").strip() and _body(pid, "metal").strip(), pid


@pytest.mark.parametrize("pattern", GPU_PATTERNS)
def test_exemplars_lint_clean(pattern: str) -> None:
    task = make(LAUNCHES[pattern].task)
    for dialect, backend in (("cuda", "mlx-cuda"), ("metal", "mlx-metal")):
        diags = lint_source(candidate(pattern, _body(pattern, dialect), dialect), backend, task)
        assert not diags, [str(d) for d in diags]


@pytest.mark.skipif(nvcc_path() is None, reason="LOUD SKIP: nvcc not found, MLX-CUDA exemplars not compile-checked")
def test_cuda_exemplars_compile_with_nvcc() -> None:
    # All exemplars in one translation unit per dtype (nvcc start-up dominates); messages name the kernel.
    kernels = []
    for pattern in GPU_PATTERNS:
        task = make(LAUNCHES[pattern].task)
        dtypes = {t.name: ("T" if t.dtype == "workload" else t.dtype) for t in task.inputs}
        kernels += find_kernels(candidate(pattern, _body(pattern, "cuda"), "cuda"), dtypes)
    assert len(kernels) == len(GPU_PATTERNS)
    for dtype in ("float32", "float16"):
        messages = compile_kernels(kernels, dtype)
        assert messages is not None
        errors = [(m.kernel, m.line, m.text) for m in messages if m.severity == "error"]
        assert not errors, (dtype, errors)


def test_check_cuda_candidate_on_one_exemplar() -> None:
    if nvcc_path() is None:
        pytest.skip("LOUD SKIP: nvcc not found")
    pattern = "online_softmax"
    src = candidate(pattern, _body(pattern, "cuda"), "cuda")
    assert check_cuda_candidate(src, make("softmax"), "float16") == []


@pytest.mark.skipif(clang_path() is None, reason="LOUD SKIP: clang++ not found (apt-get install clang): "
                                                 "Metal exemplars not syntax-checked")
@pytest.mark.parametrize("pattern", GPU_PATTERNS)
def test_metal_exemplars_pass_clang(pattern: str) -> None:
    task = make(LAUNCHES[pattern].task)
    src = candidate(pattern, _body(pattern, "metal"), "metal")
    for dtype in ("float32", "float16"):  # the shim has no bfloat vectors (class type), so no bfloat16 here
        diags = check_metal_candidate(src, task, dtype)
        assert not diags, (pattern, dtype, [str(d) for d in diags])


def _task_file(tmp: Path, name: str) -> Path:
    path = tmp / f"micro_{name}.py"
    path.write_text((DATA / "micro_tasks.py").read_text() + f"\n\nTASK = make({name!r})\n")
    return path


@pytest.mark.gpu
@pytest.mark.parametrize("pattern", GPU_PATTERNS)
def test_cuda_exemplar_passes_the_harness(pattern: str, tmp_path: Path) -> None:
    from ksearch.backends import available_backends
    from ksearch.harness import EvalOptions, evaluate
    from ksearch.tasks import load_task_file

    cuda = [b for b in available_backends() if b.name == "mlx-cuda"]
    if not cuda:
        pytest.skip("mlx-cuda is not available here")
    launch = LAUNCHES[pattern]
    task = load_task_file(_task_file(tmp_path, launch.task))
    names = list(launch.workloads) if launch.workloads else None
    result = evaluate(task, candidate(pattern, _body(pattern, "cuda"), "cuda"), cuda[0],
                      EvalOptions(workloads=names, timeout_s=300))
    assert result.status == "passed", f"{pattern}: {result.status}: {result.message[-1500:]}"


def test_tools_present_or_loudly_missing(capsys: pytest.CaptureFixture[str]) -> None:
    # Not a failure: a record in the test log of which deep checks ran.
    missing = [n for n, p in (("nvcc", nvcc_path()), ("clang++", clang_path())) if p is None]
    with capsys.disabled():
        if missing:
            print(f"\n[knowledge] deep checks NOT run, missing: {', '.join(missing)}")
    assert shutil.which("python3") or True
