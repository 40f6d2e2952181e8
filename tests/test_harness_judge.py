"""The parent's judgement of outputs (harness/judge.py): the chunked check that passes an output agrees with the
whole-array one it stands in for, value for value, across chunk and thread-slab boundaries, NaN and infinities
included."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ksearch.harness import host_threads
from ksearch.harness import judge as judging
from ksearch.tasks import get_task

TASK = get_task("softmax")
WORKLOAD = next(w for w in TASK.workloads if w.tier == "cpu")
SHAPE = tuple(TASK.outputs[0].resolved_shape(WORKLOAD))
DTYPE = TASK.outputs[0].resolved_dtype(WORKLOAD)


def whole(out: np.ndarray, ref: np.ndarray, atol: float, rtol: float) -> tuple[bool, float, float]:
    """The definition: every |out - ref| <= atol + rtol * |ref| in float32, NaN never within."""
    o, r = out.astype(np.float32), ref.astype(np.float32)
    diff, scale = np.abs(o - r), np.abs(r)
    ok = bool((diff <= atol + rtol * scale).all())
    return ok, float(diff.max()) if ok else 0.0, float((diff / np.maximum(scale, atol)).max()) if ok else 0.0


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 2**32 - 1), chunk=st.sampled_from([4099, 65536, 1 << 20]),
       slab=st.sampled_from([4096, 1 << 30]),
       faults=st.lists(st.tuples(st.floats(0, 1), st.sampled_from(["near", "over", "nan", "inf", "-inf"])),
                       max_size=3))
def test_the_chunked_check_agrees_with_the_whole_array_definition(monkeypatch: pytest.MonkeyPatch, seed: int,
                                                                  chunk: int, slab: int,
                                                                  faults: list[tuple[float, str]]) -> None:
    monkeypatch.setattr(judging, "CHUNK", chunk)  # each example sets it anew
    monkeypatch.setattr(host_threads, "MIN_SLAB", slab)  # 4096: slabs on threads of their own
    atol, rtol = TASK.tolerance(WORKLOAD.dtype)
    rng = np.random.default_rng(seed)
    ref = rng.standard_normal(SHAPE).astype(np.float32)
    out = ref + rng.uniform(-0.5, 0.5, SHAPE).astype(np.float32) * (atol + rtol * np.abs(ref))
    flat = out.reshape(-1)
    for where, kind in faults:
        i = min(int(where * flat.size), flat.size - 1)
        bound = atol + rtol * abs(float(ref.reshape(-1)[i]))
        flat[i] = {"near": ref.reshape(-1)[i] + 0.999 * bound, "over": ref.reshape(-1)[i] + 1.01 * bound + 1e-6,
                   "nan": np.nan, "inf": np.inf, "-inf": -np.inf}[kind]
    expected = whole(out, ref, atol, rtol)
    got = judging._within(out, ref, atol, rtol)
    assert got[0] == expected[0]
    if expected[0]:
        assert got[1:] == pytest.approx(expected[1:], rel=0, abs=0)
    verdict = judging.judge(TASK, WORKLOAD, [out], [DTYPE], [ref])
    assert (verdict.status == "passed") == expected[0]
    if verdict.status != "passed":
        assert "NaN or Inf" in verdict.message or "values outside" in verdict.message


def test_a_failure_names_the_worst_value_and_how_many() -> None:
    atol, rtol = TASK.tolerance(WORKLOAD.dtype)
    ref = np.ones(SHAPE, dtype=np.float32)
    out = ref.copy()
    out.reshape(-1)[[3, 70_000 % out.size]] += [1.0, 5.0]
    verdict = judging.judge(TASK, WORKLOAD, [out], [DTYPE], [ref])
    worst = np.unravel_index(70_000 % out.size, SHAPE)
    assert verdict.status == "wrong_answer" and "2 of" in verdict.message and str(tuple(int(i) for i in worst)) in \
        verdict.message and verdict.max_abs == pytest.approx(5.0)


def test_nan_in_an_output_names_the_first_one() -> None:
    # A kernel that skips a column or a row leaves NaN (uninitialised memory) there: where it starts says which.
    ref = np.ones(SHAPE, dtype=np.float32)
    out = ref.copy()
    out[5:, -1] = np.nan
    verdict = judging.judge(TASK, WORKLOAD, [out], [DTYPE], [ref])
    assert verdict.status == "wrong_answer" and verdict.max_abs is None
    assert verdict.message.endswith(f"{SHAPE[0] - 5} of {out.size} values are NaN or Inf, the first at "
                                    f"(5, {SHAPE[1] - 1})"), verdict.message
