"""Cheap, exact-enough fingerprints of arrays, used to prove that processes built the same inputs and that a
candidate did not mutate them."""

from __future__ import annotations

import hashlib
from typing import Any

import numpy as np

# Above this size only a strided sample plus exact float64 sums are hashed: a full pass over GBs would cost seconds,
# and a mutation (zeroing, scaling, writing one row) still changes the sums or the sample.
FULL_HASH_LIMIT = 64 << 20


def to_numpy(x: Any) -> np.ndarray:
    """An MLX array as NumPy without loss (bfloat16 widened to float32, which NumPy lacks)."""
    import mlx.core as mx

    if isinstance(x, mx.array):
        if x.dtype == mx.bfloat16:
            x = x.astype(mx.float32)
        return np.array(x, copy=False)
    return np.asarray(x)


def digest_numpy(a: np.ndarray) -> str:
    h = hashlib.blake2b(digest_size=16)
    h.update(f"{a.dtype.str}{a.shape}".encode())
    flat = np.ascontiguousarray(a).reshape(-1)
    if flat.nbytes <= FULL_HASH_LIMIT:
        h.update(flat.tobytes())
    else:
        step = max(1, flat.size // (FULL_HASH_LIMIT // flat.itemsize // 4))
        h.update(np.ascontiguousarray(flat[::step]).tobytes())
        h.update(np.float64(flat.astype(np.float64).sum()).tobytes())
        h.update(np.float64(np.abs(flat.astype(np.float64)).sum()).tobytes())
    return h.hexdigest()


def digest_array(x: Any) -> str:
    return digest_numpy(to_numpy(x))


def digest_inputs(arrays: dict[str, Any]) -> dict[str, str]:
    return {name: digest_array(v) for name, v in arrays.items()}
