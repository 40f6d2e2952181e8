"""The selective_state_update task: registry, shapes, baselines and the library kernel through the harness (cpu)."""

from __future__ import annotations

import pytest

mx = pytest.importorskip("mlx.core")

from ksearch.tasks import get_task  # noqa: E402
from ksearch.tasks.inputs import make_inputs  # noqa: E402


def test_task_declares_mamba_370m_gpu_workloads() -> None:
    task = get_task("selective_state_update")
    gpu = task.select_workloads("gpu", holdout=True)
    assert {w.axes["batch"] for w in gpu} == {1, 8, 16}
    assert all(w.axes["dim"] == 2048 and w.axes["R"] == 64 and w.axes["N"] == 16 for w in gpu)
    assert task.holdout_workloads("cpu") and task.holdout_workloads("gpu")
    assert set(task.baselines) == {"naive", "community"}
    for w in task.workloads:
        assert task.flops(w) > 0 and task.bytes_moved(w) > task.output_bytes(w)


def test_starters_match_reference_on_cpu() -> None:
    mx.set_default_device(mx.cpu)
    task = get_task("selective_state_update")
    for name in ("naive", "community"):
        ns: dict = {}
        exec(task.baseline(name).source_for("cpu"), ns)  # noqa: S102 - trusted starter source
        for w in task.select_workloads("cpu"):
            inputs = make_inputs(task, w, seed=5)
            ref = task.reference({k: v.astype(mx.float32) for k, v in inputs.items()})
            got = ns["run"](**inputs)
            atol, rtol = task.tolerance(w.dtype)
            for g, r, spec in zip(got, ref, task.outputs, strict=True):
                assert g.shape == spec.resolved_shape(w)
                assert mx.allclose(g.astype(mx.float32), r, atol=atol, rtol=rtol), (name, w.name, spec.name)


@pytest.mark.slow
def test_library_kernel_passes_the_harness(cpu_backend) -> None:
    from ksearch.harness import EvalOptions, evaluate

    source = "from ksearch.kernels import selective_state_update\n\n\ndef run(**kw):\n    return selective_state_update(**kw)\n"
    result = evaluate(get_task("selective_state_update"), source, cpu_backend, EvalOptions())
    assert result.status == "passed", result.message
