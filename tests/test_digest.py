"""Input fingerprints: equal for equal bytes, different after any mutation, also above the full-hash limit."""

from __future__ import annotations

import numpy as np
import pytest

from ksearch.harness import digest as D
from ksearch.harness import host_threads


@pytest.fixture(autouse=True)
def small_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(D, "FULL_HASH_LIMIT", 4096)  # exercise the large-array path on small arrays


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.int32])
def test_large_array_digest_sees_every_mutation(dtype: type) -> None:
    a = (np.random.default_rng(0).standard_normal(100_003) * 100).astype(dtype)
    base = D.digest_numpy(a)
    assert D.digest_numpy(a.copy()) == base
    step = max(1, a.size // (D.FULL_HASH_LIMIT // a.itemsize // 4))
    i, j = 1, 2  # both off the strided sample (step > 2)
    assert step > 2 and i % step and j % step
    swapped = a.copy()
    swapped[i], swapped[j] = a[j], a[i]  # same sums, same sample: only a full pass can tell
    assert a[i] != a[j] and D.digest_numpy(swapped) != base
    bumped = a.copy()
    bumped[-1] = bumped[-1] + 1  # the tail past the last whole 8-byte word
    assert D.digest_numpy(bumped) != base
    assert D.digest_numpy(a.reshape(-1, 1)) != base  # the shape is part of it


def test_small_arrays_are_hashed_whole(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(D, "FULL_HASH_LIMIT", 64 << 20)
    a = np.arange(1000, dtype=np.float32)
    b = a.copy()
    b[[3, 4]] = b[[4, 3]]
    assert D.digest_numpy(a) != D.digest_numpy(b)


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16", "int32", "uint8", "int64", "bool_"])
@pytest.mark.parametrize("keep_positions", [True, False])
def test_device_fingerprint_equals_the_hosts_and_sees_every_change(dtype: str, keep_positions: bool,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    # The worker commits to a timed call's outputs with fingerprint_mx; the parent checks what it is shown with
    # fingerprint_numpy on the raw bits: both must agree bit for bit, and a swap of two values must change it.
    import mlx.core as mx

    mx.set_default_device(mx.cpu)
    # The host runs over chunks of 64 Ki words (301 x 257 spans two), with each size's position keys kept or not.
    monkeypatch.setattr(D, "_position_keys_np", {})
    monkeypatch.setattr(host_threads, "MIN_SLAB", 4096)  # slabs on threads of their own
    if not keep_positions:
        monkeypatch.setattr(D, "_POSITIONS_NP_MAX_BYTES", 1024)
    x = (mx.random.normal((301, 257), key=mx.random.key(3)) * 50)
    x = (x > 0) if dtype == "bool_" else x.astype(getattr(mx, dtype))
    y = mx.random.normal((7,), key=mx.random.key(4))
    d = D.fingerprint_mx((x, y))
    mx.eval(d)
    assert D.fingerprint_hex(d.tolist()) == D.fingerprint_numpy([D.raw_bits(x), D.raw_bits(y)])
    a = D.raw_bits(x).copy()
    flat = a.reshape(-1)
    i, j = next((i, i + 1) for i in range(flat.size - 1) if flat[i] != flat[i + 1])
    flat[i], flat[j] = flat[j], flat[i]
    assert D.fingerprint_numpy([a, D.raw_bits(y)]) != D.fingerprint_numpy([D.raw_bits(x), D.raw_bits(y)])
    assert D.fingerprint_numpy([D.raw_bits(y), D.raw_bits(x)]) != D.fingerprint_numpy([D.raw_bits(x),
                                                                                       D.raw_bits(y)])
    if dtype == "bfloat16":
        np.testing.assert_array_equal(D.from_raw_bits(D.raw_bits(x), "bfloat16"), np.array(x.astype(mx.float32)))


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16", "int64", "bool_", "uint8"])
def test_a_runs_fingerprints_taken_together_are_each_calls_own(dtype: str) -> None:
    # The worker fingerprints a run's outputs in one pass (stacked); the parent checks each call's on the host.
    import mlx.core as mx

    mx.set_default_device(mx.cpu)
    calls = [tuple(mx.random.randint(0, 3, (5, 7 + k), key=mx.random.key(10 * c + k)).astype(getattr(mx, dtype))
                   for k in range(3)) for c in range(4)]
    together = D.fingerprints_mx(calls)
    assert together.shape == (4, 2)
    lanes = together.tolist()
    assert lanes == [D.fingerprint_mx(c).tolist() for c in calls]
    assert [D.fingerprint_hex(x) for x in lanes] == [D.fingerprint_numpy([D.raw_bits(a) for a in c]) for c in calls]
    assert len({tuple(x) for x in lanes}) == 4


def test_a_runs_fingerprints_of_unlike_outputs_are_taken_one_by_one(monkeypatch: pytest.MonkeyPatch) -> None:
    import mlx.core as mx

    mx.set_default_device(mx.cpu)
    unlike = [(mx.ones((3, 4)),), (mx.ones((4, 3)),), (mx.ones((3, 4), dtype=mx.float16),)]
    assert D.fingerprints_mx(unlike).tolist() == [D.fingerprint_mx(c).tolist() for c in unlike]
    assert D.fingerprints_mx([]).shape == (0, 2)
    monkeypatch.setattr(D, "STACK_MAX_ELEMENTS", 10)  # too large to stack: call by call, the same lanes
    like = [(mx.arange(12).reshape(3, 4),), (mx.arange(12).reshape(3, 4) + 1,)]
    assert D.fingerprints_mx(like).tolist() == [D.fingerprint_mx(c).tolist() for c in like]
    with pytest.raises(AttributeError):  # not MLX arrays: the worker reports the candidate's failure
        D.fingerprints_mx([(1.0,), (2.0,)])
