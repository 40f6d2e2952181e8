"""Prefill inputs for the benchmarks and checks (bench.attention.prefill_inputs): `random` draws what the benchmark
always drew, `rising` makes every row's maximum grow by about RISE units of exp2 a 64-key tile, so that the online
softmax's rescale runs inside the loop (half the tiles past the conditional rescale's 2^8), `stepped` raises every
row's scores by about STEP from key STEP_AT on, and a bad kind is refused."""

from __future__ import annotations

import math

import numpy as np
import pytest

mx = pytest.importorskip("mlx.core")

from ksearch.bench.attention import RISE, STEP, STEP_AT, prefill_inputs  # noqa: E402


def test_random_inputs_are_the_seeded_normal_draws() -> None:
    q, k, v = prefill_inputs((1, 4, 256, 64), (1, 2, 320, 64), mx.float16)
    mx.random.seed(0)
    for got, shape in ((q, (1, 4, 256, 64)), (k, (1, 2, 320, 64)), (v, (1, 2, 320, 64))):
        assert got.dtype == mx.float16 and bool(mx.array_equal(got, mx.random.normal(shape).astype(mx.float16)))


@pytest.mark.parametrize("d", [64, 128])
def test_rising_scores_grow_about_rise_a_tile(d: int) -> None:
    q, k, _ = prefill_inputs((1, 4, 256, d), (1, 2, 512, d), mx.bfloat16, "rising")
    qf = np.array(q.astype(mx.float32))
    kf = np.repeat(np.array(k.astype(mx.float32)), 2, axis=1)  # two query heads a key head
    s = qf @ kf.transpose(0, 1, 3, 2) / math.sqrt(d) * math.log2(math.e)  # exp2 units, as the kernels use
    running = np.maximum.accumulate(s.reshape(1, 4, 256, 8, 64).max(axis=-1), axis=-1)
    growth = np.diff(running, axis=-1)
    assert abs(growth.mean() - RISE) < 1.0
    assert 0.25 < (growth > 8).mean() < 0.75  # both branches of the conditional rescale, in every run
    assert (running[..., -1] > running[..., 0] + 4 * RISE).all()


@pytest.mark.parametrize("d", [64, 128])
def test_stepped_scores_sit_about_step_higher_from_step_at(d: int) -> None:
    q, k, _ = prefill_inputs((1, 4, 256, d), (1, 2, 512, d), mx.float16, "stepped")
    qf = np.array(q.astype(mx.float32))
    kf = np.repeat(np.array(k.astype(mx.float32)), 2, axis=1)
    s = qf @ kf.transpose(0, 1, 3, 2) / math.sqrt(d) * math.log2(math.e)
    rise = s[..., STEP_AT:].mean(axis=-1) - s[..., :STEP_AT].mean(axis=-1)  # per row
    assert abs(rise.mean() - STEP) < 0.5 and (rise > STEP - 2).all()
    # past the 2^4 a lane's 16 values of P may average before its sum passes 2^8, within the 2^8 of `_cr`
    gain = s[..., STEP_AT:].max(axis=-1) - s[..., :STEP_AT].max(axis=-1)
    assert 4 < np.median(gain) < 8


def test_an_unknown_kind_is_refused() -> None:
    with pytest.raises(ValueError, match="use one of random, rising, stepped"):
        prefill_inputs((1, 1, 8, 64), (1, 1, 8, 64), mx.float16, "peaked")
