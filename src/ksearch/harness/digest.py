"""Cheap, exact-enough fingerprints of arrays, used to prove that processes built the same inputs and that a
candidate did not mutate them."""

from __future__ import annotations

import hashlib
import zlib
from typing import Any

import numpy as np

# Above this size the bytes are fingerprinted by CRC-32 (zlib's hardware-assisted loop, ~7 GB/s here) and a 64-bit
# sum of their 8-byte words, next to a blake2b of a strided sample. The earlier float64 sums of a widened copy took
# 16 s for one 1 GB KV cache (benchmarks/digest_speed.py), several times per trial: gqa_decode's GPU evaluations
# never finished. CRC-32 sees every byte, so a mutation that keeps sums (swapping two values) changes it too.
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
        raw = flat.view(np.uint8)
        h.update(zlib.crc32(raw.data).to_bytes(4, "little"))
        words = raw[: raw.size // 8 * 8].view(np.uint64)
        h.update(int(words.sum(dtype=np.uint64)).to_bytes(8, "little"))
        h.update(raw[words.size * 8:].tobytes())
    return h.hexdigest()


def digest_array(x: Any) -> str:
    return digest_numpy(to_numpy(x))


def digest_inputs(arrays: dict[str, Any]) -> dict[str, str]:
    return {name: digest_array(v) for name, v in arrays.items()}
