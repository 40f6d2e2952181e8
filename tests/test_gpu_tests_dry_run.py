"""The GPU tests that judge template renderings, run up to their GPU step on the CPU: the harness's `evaluate` is
replaced by a recorder, so a parameter set a family no longer accepts (or a rendering that no longer builds) fails
here, in CI, instead of in a GPU call. Each test must reach its `evaluate` with the workloads it names."""

from __future__ import annotations

import itertools
from types import SimpleNamespace
from typing import Any

import pytest
import test_gpu_attention as gpu

# Every test of test_gpu_attention.py that renders a family and hands it to the harness; the others run kernels or
# scripts on the GPU directly (check-prefill, check-decode, the tile images).
RENDERING_TESTS = ["test_cuda_family_renderings_pass_the_harness",
                   "test_the_decode_familys_tensor_core_choice_passes_the_harness",
                   "test_the_decode_familys_block_floor_passes_the_harness",
                   "test_the_decode_familys_constants_pass_the_harness_with_the_tensor_core_kernel",
                   "test_tensor_core_families_pass_the_holdout_workloads",
                   "test_the_attention_familys_constants_pass_the_harness"]


def _cases(name: str) -> list[dict[str, Any]]:
    """The keyword arguments of each case of test `name`, its parametrize marks expanded."""
    fn = getattr(gpu, name)
    axes = []
    for mark in getattr(fn, "pytestmark", []):
        if mark.name != "parametrize":
            continue
        names = [n.strip() for n in mark.args[0].split(",")] if isinstance(mark.args[0], str) else list(mark.args[0])
        values = [v if len(names) > 1 else (v,) for v in mark.args[1]]
        axes.append([dict(zip(names, v, strict=True)) for v in values])
    return [{k: v for part in combo for k, v in part.items()} for combo in itertools.product(*axes)]


@pytest.mark.parametrize("name", RENDERING_TESTS)
def test_each_rendering_test_reaches_the_harness(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    handed: list[tuple[str, list[str]]] = []

    def recorder(task: Any, source: str, backend: Any, options: Any) -> Any:
        compile(source, "candidate", "exec")  # the rendering is Python the worker could load
        handed.append((task.name, list(options.workloads)))
        return SimpleNamespace(status="passed", message="")

    monkeypatch.setattr(gpu, "evaluate", recorder)
    cases = _cases(name)
    for kwargs in cases:
        getattr(gpu, name)(cuda_backend=None, **kwargs)
    assert len(handed) == len(cases) and all(workloads for _, workloads in handed)


def test_the_list_names_every_test_that_calls_the_harness() -> None:
    import inspect

    calls = {n for n, fn in vars(gpu).items() if n.startswith("test_") and "evaluate(" in inspect.getsource(fn)}
    assert calls == set(RENDERING_TESTS)
