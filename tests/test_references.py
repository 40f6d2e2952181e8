"""Every task's reference against an independent NumPy implementation (float64), and the input generator's
determinism across processes."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

mx = pytest.importorskip("mlx.core")

from ksearch.tasks import get_task  # noqa: E402
from ksearch.tasks.inputs import make_inputs  # noqa: E402

TASKS = ["softmax", "rmsnorm", "selective_scan", "attention", "gqa_decode"]


@pytest.fixture(autouse=True, scope="module")
def _cpu():
    mx.set_default_device(mx.cpu)


def f64(a) -> np.ndarray:
    return np.array(a.astype(mx.float32)).astype(np.float64)


def run_reference(task, arrays: dict, **params) -> list[np.ndarray]:
    copies = {k: v.astype(mx.float32) for k, v in arrays.items()}
    outs = task.reference(copies, **params)
    outs = outs if isinstance(outs, tuple | list) else (outs,)
    mx.eval(list(outs))
    return [f64(o) for o in outs]


# -- independent NumPy implementations -----------------------------------------------------------------------------
def np_softmax(x: np.ndarray) -> np.ndarray:
    z = np.exp(x - x.max(axis=-1, keepdims=True))
    return z / z.sum(axis=-1, keepdims=True)


def np_rmsnorm(x: np.ndarray, w: np.ndarray, eps: float = 1e-5) -> np.ndarray:
    return x / np.sqrt((x**2).mean(axis=-1, keepdims=True) + eps) * w


def np_selective_scan(u, delta, A, B, C, D, z, delta_bias):
    """mamba_ssm's selective_scan_ref (delta_softplus=True, D and z), as a plain loop over time in float64."""
    batch, dim, length = u.shape
    n = A.shape[1]
    d = delta + delta_bias[None, :, None]
    dt = np.where(d > 20.0, d, np.log1p(np.exp(np.minimum(d, 20.0))))
    state = np.zeros((batch, dim, n))
    y = np.zeros((batch, dim, length))
    for t in range(length):
        for b in range(batch):
            decay = np.exp(dt[b, :, t][:, None] * A)  # (dim, n)
            state[b] = decay * state[b] + (dt[b, :, t] * u[b, :, t])[:, None] * B[b, :, t][None, :]
            y[b, :, t] = state[b] @ C[b, :, t]
    y = y + D[None, :, None] * u
    y = y * (z / (1.0 + np.exp(-z)))
    return y, state


def np_attention(q, k, v, causal: bool) -> np.ndarray:
    b, hq, length, d = q.shape
    hkv, s = k.shape[1], k.shape[2]
    out = np.zeros_like(q)
    for h in range(hq):
        kv = h // (hq // hkv)
        scores = q[:, h] @ k[:, kv].transpose(0, 2, 1) / np.sqrt(d)  # (b, L, S)
        if causal:
            allowed = np.arange(s)[None, :] <= np.arange(length)[:, None] + (s - length)
            scores = np.where(allowed[None], scores, -np.inf)
        out[:, h] = np_softmax(scores) @ v[:, kv]
    return out


def np_gqa_decode(q, k_cache, v_cache, length: int) -> np.ndarray:
    return np_attention(q, k_cache[:, :, :length], v_cache[:, :, :length], causal=False)


def _inputs(task_name: str, workload: str | None = None, seed: int = 1234):
    task = get_task(task_name)
    w = task.workload(workload) if workload else task.select_workloads("cpu")[0]
    return task, w, make_inputs(task, w, seed)


# -- the checks ----------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("workload", ["cpu_256x1024_f32", "cpu_256x1024_f16"])
def test_softmax_reference(workload):
    task, w, arrays = _inputs("softmax", workload)
    (got,) = run_reference(task, arrays)
    np.testing.assert_allclose(got, np_softmax(f64(arrays["x"])), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("workload", ["cpu_512x1024_f32", "cpu_512x1024_f16"])
def test_rmsnorm_reference(workload):
    task, w, arrays = _inputs("rmsnorm", workload)
    (got,) = run_reference(task, arrays)
    np.testing.assert_allclose(got, np_rmsnorm(f64(arrays["x"]), f64(arrays["weight"])), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("workload", ["cpu_b1_d64_l128_f32", "cpu_b1_d64_l128_f16"])
def test_selective_scan_reference(workload):
    task, w, arrays = _inputs("selective_scan", workload)
    y, state = run_reference(task, arrays)
    want_y, want_state = np_selective_scan(*(f64(arrays[k]) for k in ("u", "delta", "A", "B", "C", "D", "z",
                                                                      "delta_bias")))
    np.testing.assert_allclose(y, want_y, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(state, want_state, rtol=1e-4, atol=1e-4)


def test_selective_scan_reference_softplus_branch():
    # delta + bias above 20 takes the identity branch of softplus (as mamba_ssm's kernel does).
    task, w, arrays = _inputs("selective_scan")
    arrays = dict(arrays)
    arrays["delta"] = arrays["delta"] + 25.0
    arrays["A"] = arrays["A"] * 0.01  # keep exp(dt * A) away from underflow so the state is not trivially 0
    y, state = run_reference(task, arrays)
    want_y, want_state = np_selective_scan(*(f64(arrays[k]) for k in ("u", "delta", "A", "B", "C", "D", "z",
                                                                      "delta_bias")))
    np.testing.assert_allclose(y, want_y, rtol=2e-4, atol=2e-4)
    np.testing.assert_allclose(state, want_state, rtol=2e-4, atol=2e-4)


@pytest.mark.parametrize("workload", ["cpu_b1_h4_l128_d64_f32", "cpu_b1_h4_l128_d64_f32_causal",
                                      "cpu_b1_h4_l256_d32_f16_causal", "cpu_b2_h4_l96_d64_f32"])
def test_attention_reference_on_workloads(workload):
    task, w, arrays = _inputs("attention", workload)
    (got,) = run_reference(task, arrays, **w.params)
    want = np_attention(*(f64(arrays[k]) for k in ("q", "k", "v")), causal=bool(w.params["causal"]))
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize(("b", "hq", "hkv", "length", "s", "d", "causal"), [
    (1, 4, 2, 5, 13, 16, True),    # L < S: the causal mask is aligned to the lower right
    (2, 6, 3, 7, 7, 8, True),
    (1, 8, 2, 9, 4, 16, False),    # L > S without a mask
    (1, 4, 1, 1, 33, 32, True),    # one query row sees every key
])
def test_attention_reference_gqa_and_lower_right_causal(b, hq, hkv, length, s, d, causal):
    task = get_task("attention")
    rng = np.random.default_rng(7)
    q, k, v = (rng.standard_normal(shape).astype(np.float32)
               for shape in ((b, hq, length, d), (b, hkv, s, d), (b, hkv, s, d)))
    (got,) = run_reference(task, {"q": mx.array(q), "k": mx.array(k), "v": mx.array(v)}, causal=causal)
    want = np_attention(q.astype(np.float64), k.astype(np.float64), v.astype(np.float64), causal)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("workload", ["cpu_b1_h8_kv2_len300_d64_f32", "cpu_b1_h8_kv2_len700_d64_f16",
                                      "cpu_b1_h4_kv1_len513_d128_f32"])
def test_gqa_decode_reference(workload):
    task, w, arrays = _inputs("gqa_decode", workload)
    (got,) = run_reference(task, arrays, **w.params)
    want = np_gqa_decode(*(f64(arrays[k]) for k in ("q", "k_cache", "v_cache")), length=int(w.params["length"]))
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


def test_gqa_decode_reference_ignores_positions_past_length():
    task, w, arrays = _inputs("gqa_decode")
    length = int(w.params["length"])
    (before,) = run_reference(task, arrays, length=length)
    poisoned = dict(arrays)
    for name in ("k_cache", "v_cache"):
        junk = mx.full(arrays[name].shape, 1e4, dtype=arrays[name].dtype)
        keep = mx.arange(arrays[name].shape[2])[None, None, :, None] < length
        poisoned[name] = mx.where(keep, arrays[name], junk)
    (after,) = run_reference(task, poisoned, length=length)
    np.testing.assert_array_equal(before, after)


_DIGESTS = """
import json, sys
import mlx.core as mx
mx.set_default_device(mx.cpu)
from ksearch.harness.digest import digest_inputs
from ksearch.tasks import get_task
from ksearch.tasks.inputs import make_inputs
out = {}
for name in sys.argv[1:]:
    task = get_task(name)
    for w in task.select_workloads("cpu", holdout=True):
        for seed in (0, 987654321987):
            out[f"{name}/{w.name}/{seed}"] = digest_inputs(make_inputs(task, w, seed))
print(json.dumps(out, sort_keys=True))
"""


def test_input_generator_is_deterministic_across_processes():
    def digests() -> dict:
        done = subprocess.run([sys.executable, "-c", _DIGESTS, *TASKS], capture_output=True, text=True, timeout=120,
                              check=True)
        return json.loads(done.stdout)

    first, second = digests(), digests()
    assert first == second
    assert len(first) == sum(2 * len(get_task(t).select_workloads("cpu", holdout=True)) for t in TASKS)
    # different seeds give different inputs
    assert first["softmax/cpu_256x1024_f32/0"] != first["softmax/cpu_256x1024_f32/987654321987"]


def test_an_unknown_init_is_named_with_the_known_ones():
    from ksearch.tasks.base import TensorSpec
    from ksearch.tasks.inputs import draw

    known = r"\(normal, uniform, positive, negative, zeros\)"
    with pytest.raises(ValueError, match=r"tensor 'x': unknown init 'weird' " + known):
        draw(TensorSpec("x", ("n",), init="weird"), (3,), mx.random.key(1), "float32")
    negative = draw(TensorSpec("x", ("n",), init="negative", scale=2.0), (64,), mx.random.key(1), "float32")
    assert float(negative.max()) <= -0.1 and float(negative.min()) >= -2.1
