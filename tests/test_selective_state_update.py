"""The selective_state_update task: registry, shapes, baselines and the library kernel through the harness (cpu)."""

from __future__ import annotations

import numpy as np
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


def _step_inputs(batch: int = 2, dim: int = 8, n: int = 4, r: int = 3, k: int = 4) -> dict:
    mx.random.seed(4)
    rn = mx.random.normal
    return {"x": rn((batch, dim)), "z": rn((batch, dim)), "conv_state": rn((batch, k - 1, dim)),
            "conv_weight": rn((dim, k)), "conv_bias": rn((dim,)), "x_proj_weight": rn((r + 2 * n, dim)),
            "dt_proj_weight": rn((dim, r)), "dt_bias": rn((dim,)), "A": -mx.exp(rn((dim, n))), "D": rn((dim,)),
            "ssm_state": rn((batch, dim, n))}


@pytest.mark.parametrize("sizes", [(2, 8, 4, 3, 1), (2, 8, 20, 3, 4), (0, 8, 4, 3, 4), (2, 0, 4, 3, 4),
                                   (2, 8, 0, 3, 4), (2, 8, 4, 0, 4)])
def test_the_step_matches_the_reference_on_odd_but_valid_shapes(sizes: tuple[int, ...]) -> None:
    """One conv tap, more states than the kernels keep, empty axes (no kernel launched: ops), no dt rank."""
    from ksearch.kernels import selective_state_update
    from ksearch.tasks.selective_state_update import reference

    inp = _step_inputs(*sizes)
    for got, want in zip(selective_state_update(**inp), reference(inp), strict=True):
        assert got.shape == want.shape and mx.allclose(got, want, atol=1e-5)
    y, conv_state, _ = selective_state_update(**{**inp, "conv_bias": None})
    assert y.shape == inp["x"].shape and conv_state.shape == inp["conv_state"].shape


STEP_REFUSALS = [
    # (what is wrong, the changed arguments, the exception, what the message says)
    ("x of one token with its axis", lambda i: {"x": i["x"][:, None]}, ValueError,
     r"x must be 2-d, \(batch, dim\); got shape \(2, 1, 8\) \(one token: x\[:, 0\]"),
    ("z batch of 1", lambda i: {"z": i["z"][:1]}, ValueError, r"z's batch is 1 where x's is 2"),
    ("conv_state length", lambda i: {"conv_state": i["conv_state"][:, :1]}, ValueError,
     r"conv_state must hold the previous K - 1 = 3 inputs, K = conv_weight.shape\[1\] = 4"),
    ("conv_state as (batch, dim, K-1)", lambda i: {"conv_state": i["conv_state"].swapaxes(1, 2)}, ValueError,
     r"conv_state's dim is 3 where x's is 8"),
    ("conv_weight of PyTorch's layout", lambda i: {"conv_weight": i["conv_weight"][:, None]}, ValueError,
     r"conv_weight must be 2-d, \(dim, K\); got shape \(8, 1, 4\) .*conv_weight.reshape\(dim, K\)"),
    ("x_proj_weight rows", lambda i: {"x_proj_weight": i["x_proj_weight"][:5]}, ValueError,
     r"x_proj_weight must have R \+ 2N = 11 rows \(R = dt_proj_weight.shape\[1\] = 3, N = A.shape\[1\] = 4\)"),
    ("x_proj_weight transposed", lambda i: {"x_proj_weight": i["x_proj_weight"].T}, ValueError,
     r"x_proj_weight's dim is 11 where x's is 8"),
    ("dt_bias dim", lambda i: {"dt_bias": i["dt_bias"][:4]}, ValueError, r"dt_bias's dim is 4 where x's is 8"),
    ("ssm_state batch of 1", lambda i: {"ssm_state": i["ssm_state"][:1]}, ValueError,
     r"ssm_state's batch is 1 where x's is 2"),
    ("ssm_state states", lambda i: {"ssm_state": i["ssm_state"][..., :2]}, ValueError,
     r"ssm_state's N is 2 where A's is 4"),
    ("int32", lambda i: {"x": i["x"].astype(mx.int32)}, TypeError, r"x has dtype int32; pass float16"),
    ("numpy", lambda i: {"ssm_state": np.array(i["ssm_state"])}, TypeError, r"ssm_state must be an mx.array"),
    ("D None", lambda i: {"D": None}, TypeError, r"D must be an mx.array; got None"),
]


@pytest.mark.parametrize(("change", "error", "message"), [r[1:] for r in STEP_REFUSALS],
                         ids=[r[0] for r in STEP_REFUSALS])
@pytest.mark.parametrize("backend", [None, "cuda"])
def test_the_step_refuses_what_it_cannot_take_naming_the_argument(monkeypatch, backend, change, error,
                                                                  message) -> None:
    """One exception before any path runs: unchecked, the kernel reads a batch-of-1 z or state through its strides
    past its end, the ops path broadcasts it, an int32 x comes back as an int32 y."""
    from ksearch.kernels import selective_state_update
    from ksearch.kernels.selective_scan import cuda

    monkeypatch.setattr(cuda, "mixer_step", lambda *a, **k: pytest.fail("a kernel ran"))
    inp = _step_inputs()
    with pytest.raises(error, match="^selective_state_update: " + message):
        selective_state_update(**{**inp, **change(inp)}, backend=backend)


def test_the_step_refuses_a_backend_that_does_not_exist() -> None:
    from ksearch.kernels import selective_state_update

    with pytest.raises(ValueError, match=r"^backend='gpu': name one of ops, cuda, metal, or None"):
        selective_state_update(**_step_inputs(), backend="gpu")
