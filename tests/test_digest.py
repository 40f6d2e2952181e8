"""Input fingerprints: equal for equal bytes, different after any mutation, also above the full-hash limit."""

from __future__ import annotations

import numpy as np
import pytest

from ksearch.harness import digest as D


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
