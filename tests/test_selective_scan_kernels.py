"""The ops path of ksearch.kernels (what mlx-cpu runs) against the task references, plus dispatch rules."""

from __future__ import annotations

import pytest

mx = pytest.importorskip("mlx.core")

from ksearch.kernels import selective_scan, selective_state_update  # noqa: E402
from ksearch.kernels.selective_scan import kernel_backend, ops  # noqa: E402
from ksearch.tasks import get_task  # noqa: E402
from ksearch.tasks.inputs import make_inputs  # noqa: E402


def _close(got, ref, dtype: str) -> None:
    from ksearch.tasks.base import DEFAULT_TOLERANCES

    atol, rtol = DEFAULT_TOLERANCES[dtype]
    for g, r in zip(got, ref, strict=True):
        assert g.shape == r.shape
        assert mx.allclose(g.astype(mx.float32), r.astype(mx.float32), atol=atol, rtol=rtol)


@pytest.fixture(autouse=True)
def _cpu() -> None:
    mx.set_default_device(mx.cpu)


@pytest.mark.parametrize("task_name", ["selective_scan", "selective_state_update"])
def test_ops_path_matches_reference_on_cpu_workloads(task_name: str) -> None:
    task = get_task(task_name)
    fn = selective_scan if task_name == "selective_scan" else selective_state_update
    for w in task.select_workloads("cpu", holdout=True):
        inputs = make_inputs(task, w, seed=11)
        ref = task.reference({k: v.astype(mx.float32) for k, v in inputs.items()})
        _close(fn(**inputs), ref, w.dtype)


@pytest.mark.parametrize(("method", "chunk"), [("sequential", 7), ("sequential", 64), ("logcumsumexp", 8)])
def test_chunk_methods_and_initial_state(method: str, chunk: int) -> None:
    task = get_task("selective_scan")
    w = task.workload("cpu_b2_d32_l256_f32")
    inp = make_inputs(task, w, seed=2)
    ref_y, ref_h = task.reference(inp)
    cut = 100
    first = {k: (v[..., :cut] if v.ndim == 3 and k not in ("A",) else v) for k, v in inp.items()}
    rest = {k: (v[..., cut:] if v.ndim == 3 and k not in ("A",) else v) for k, v in inp.items()}
    y1, h1 = ops.scan(**first, chunk=chunk, method=method)
    y2, h2 = ops.scan(**rest, h0=h1, chunk=chunk, method=method)
    _close((mx.concatenate([y1, y2], axis=-1), h2), (ref_y, ref_h), "float32")


def test_causal_conv_with_and_without_state() -> None:
    x = mx.random.normal((2, 6, 5), key=mx.random.key(0))
    w = mx.random.normal((5, 4), key=mx.random.key(1))
    bias = mx.random.normal((5,), key=mx.random.key(2))
    y, st = ops.conv_silu(x, w, bias, None)
    padded = mx.concatenate([mx.zeros((2, 3, 5)), x], axis=1)
    ref = sum(padded[:, k:k + 6] * w[:, k] for k in range(4)) + bias
    assert mx.allclose(y, ref * mx.sigmoid(ref), atol=1e-5)
    assert mx.array_equal(st, x[:, -3:])
    y2, _ = ops.conv_silu(x[:, 3:], w, bias, x[:, :3])  # continuing from a state equals the one-shot conv
    assert mx.allclose(y2, y[:, 3:], atol=1e-5)


def test_dispatch_is_ops_on_cpu_and_can_be_forced(monkeypatch: pytest.MonkeyPatch) -> None:
    assert kernel_backend() == "ops"
    monkeypatch.setenv("KSEARCH_SCAN_BACKEND", "cuda")
    assert kernel_backend() == "cuda"


def test_decode_step_takes_the_kernel_up_to_its_channel_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    # The step kernel keeps a float per channel in static shared memory: wider models take the ops path.
    from ksearch.kernels.selective_scan import MAX_KERNEL_DIM, cuda

    monkeypatch.setenv("KSEARCH_SCAN_BACKEND", "cuda")
    monkeypatch.setattr(cuda, "mixer_step", lambda *a: "kernel")
    monkeypatch.setattr(ops, "mixer_step", lambda *a: "ops")
    n, k, r = 4, 4, 2

    def step(dim: int) -> object:
        z = mx.zeros
        return selective_state_update(z((1, dim)), z((1, dim)), z((1, k - 1, dim)), z((k, dim)), None,
                                      z((r + 2 * n, dim)), z((dim, r)), z((dim,)), z((dim, n)), z((dim,)),
                                      z((1, dim, n)))

    assert step(64) == "kernel"
    assert step(MAX_KERNEL_DIM["cuda"] + 1) == "ops"
