"""The ops path of ksearch.kernels (what mlx-cpu runs) against the task references, plus dispatch rules."""

from __future__ import annotations

import numpy as np
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
        return selective_state_update(z((1, dim)), z((1, dim)), z((1, k - 1, dim)), z((dim, k)), None,
                                      z((r + 2 * n, dim)), z((dim, r)), z((dim,)), z((dim, n)), z((dim,)),
                                      z((1, dim, n)))

    assert step(64) == "kernel"
    assert step(MAX_KERNEL_DIM["cuda"] + 1) == "ops"


def _scan_inputs(batch: int = 2, dim: int = 8, n: int = 4, length: int = 10) -> dict:
    r = mx.random.normal
    mx.random.seed(3)
    return {"u": r((batch, dim, length)), "delta": r((batch, dim, length)), "A": -mx.exp(r((dim, n))),
            "B": r((batch, n, length)), "C": r((batch, n, length)), "D": r((dim,)), "z": r((batch, dim, length)),
            "delta_bias": r((dim,))}


@pytest.mark.parametrize("sizes", [(2, 8, 4, 1), (1, 3, 2, 130), (2, 8, 20, 5), (0, 8, 4, 5), (2, 0, 4, 5),
                                   (2, 8, 0, 5)])
def test_the_scan_matches_the_reference_on_odd_but_valid_shapes(sizes: tuple[int, int, int, int]) -> None:
    """L of 1 and past a chunk, more states than the kernels keep, empty axes (no kernel launched: ops)."""
    inp = _scan_inputs(*sizes)
    _close(selective_scan(**inp), get_task("selective_scan").reference(inp), "float32")


def test_a_scan_of_no_steps_gives_an_empty_y_and_the_state_it_was_given() -> None:
    inp = {k: (v[..., :0] if v.ndim == 3 else v) for k, v in _scan_inputs().items()}
    h0 = mx.random.normal((2, 8, 4)).astype(mx.float16)
    y, h = selective_scan(**inp, h0=h0)
    assert y.shape == (2, 8, 0) and h.dtype == mx.float32 and mx.array_equal(h, h0.astype(mx.float32))
    y, h = selective_scan(**inp)
    assert y.shape == (2, 8, 0) and mx.array_equal(h, mx.zeros((2, 8, 4)))


def test_the_scan_takes_strided_views_and_mixed_float_dtypes() -> None:
    inp = _scan_inputs()
    ref = get_task("selective_scan").reference(inp)
    strided = {k: (mx.contiguous(v.swapaxes(1, 2)).swapaxes(1, 2) if v.ndim == 3 else v) for k, v in inp.items()}
    _close(selective_scan(**strided), ref, "float32")
    y, h = selective_scan(**{**inp, "u": inp["u"].astype(mx.float16)})
    assert y.dtype == mx.float16 and h.dtype == mx.float32


SCAN_REFUSALS = [
    # (what is wrong, the changed arguments, the exception, what the message says)
    ("u rank 2", lambda i: {"u": i["u"][0]}, ValueError, r"u must be 3-d, \(batch, dim, L\); got shape \(8, 10\)"),
    ("delta dim", lambda i: {"delta": i["delta"][:, :4]}, ValueError, r"delta's dim is 4 where u's is 8"),
    ("z length", lambda i: {"z": i["z"][..., :5]}, ValueError, r"z's L is 5 where u's is 10"),
    ("B batch of 1", lambda i: {"B": i["B"][:1]}, ValueError, r"B's batch is 1 where u's is 2"),
    ("C states", lambda i: {"C": i["C"][:, :2]}, ValueError, r"C's N is 2 where A's is 4"),
    ("A rank 1", lambda i: {"A": i["A"][:, 0]}, ValueError, r"A must be 2-d, \(dim, N\)"),
    ("D scalar", lambda i: {"D": mx.array(1.0)}, ValueError, r"D must be 1-d, \(dim\); got shape \(\)"),
    ("delta_bias dim", lambda i: {"delta_bias": i["delta_bias"][:4]}, ValueError, r"delta_bias's dim is 4"),
    ("h0 batch of 1", lambda i: {"h0": mx.zeros((1, 8, 4))}, ValueError, r"h0's batch is 1 where u's is 2"),
    ("int32", lambda i: {"u": i["u"].astype(mx.int32)}, TypeError, r"u has dtype int32; pass float16"),
    ("numpy", lambda i: {"u": np.array(i["u"])}, TypeError, r"u must be an mx.array; got a numpy.ndarray"),
    ("z None", lambda i: {"z": None}, TypeError, r"z must be an mx.array; got None"),
]


@pytest.mark.parametrize(("change", "error", "message"), [r[1:] for r in SCAN_REFUSALS],
                         ids=[r[0] for r in SCAN_REFUSALS])
@pytest.mark.parametrize("backend", [None, "cuda"])
def test_the_scan_refuses_what_it_cannot_take_naming_the_argument(monkeypatch: pytest.MonkeyPatch, backend, change,
                                                                  error, message) -> None:
    """One exception before any path runs: unchecked, the kernels read a batch-of-1 B through its strides past its
    end, the ops path broadcasts it, an int32 u comes back as an int32 y."""
    from ksearch.kernels.selective_scan import cuda

    monkeypatch.setattr(cuda, "scan", lambda *a, **k: pytest.fail("a kernel ran"))
    inp = _scan_inputs()
    with pytest.raises(error, match="^selective_scan: " + message):
        selective_scan(**{**inp, **change(inp)}, backend=backend)


def test_a_backend_that_does_not_exist_is_refused_in_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    inp = _scan_inputs()
    for given in (inp, {k: (v[..., :0] if v.ndim == 3 else v) for k, v in inp.items()}):  # L = 0 too
        with pytest.raises(ValueError, match=r"^backend='gpu': name one of ops, cuda, metal, or None"):
            selective_scan(**given, backend="gpu")
    monkeypatch.setenv("KSEARCH_SCAN_BACKEND", "nonsense")
    with pytest.raises(ValueError, match=r"^KSEARCH_SCAN_BACKEND='nonsense': name one of ops, cuda, metal"):
        selective_scan(**inp)
