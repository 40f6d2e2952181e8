"""Cheap, exact-enough fingerprints of arrays, used to prove that processes built the same inputs and that a
candidate did not mutate them."""

from __future__ import annotations

import functools
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


# -- fingerprints computed where the arrays live ---------------------------------------------------------------------
# Inputs of several GB would cost seconds to copy to the host and hash there, several times per trial; and every timed
# call's output must be fingerprinted (a commitment, see worker.py) in the microseconds between two calls. Both are
# done on the device: every element's bits, mixed with its position by an integer hash (multiply, xor-shift; uint32
# arithmetic wraps), summed into two 32-bit lanes. The parent computes the same function with NumPy on bytes it
# received (fingerprint_numpy), so a worker's claim about an output it later shows can be checked bit for bit.
_M0, _M1, _M2, _M3 = 0x9E3779B1, 0x85EBCA77, 0xC2B2AE3D, 0x27D4EB2F
_positions: dict[tuple[int, int], Any] = {}
_OPS: dict[str, Any] = {}


def capture_ops() -> None:
    """Bind the MLX functions the fingerprints use, once: a worker calls this before any candidate code exists, so a
    candidate that replaces mx.sum (to slow down the harness's work in its process, say) changes nothing here."""
    import mlx.core as mx

    if not _OPS:
        _OPS.update(sum=mx.sum, stack=mx.stack, arange=mx.arange, zeros=mx.zeros, array=mx.array, eval=mx.eval)


def _op(name: str) -> Any:
    capture_ops()
    return _OPS[name]


def _words_mx(x: Any, rows: bool = False) -> Any:
    """The 32-bit words the fingerprint mixes, flat (or per row of a 2-D array, with `rows`)."""
    import mlx.core as mx

    flat = x if rows else x.reshape(-1)
    size = x.dtype.size
    if x.dtype == mx.bool_:
        return flat.astype(mx.uint32)
    if size == 4:
        return flat.view(mx.uint32)
    if size == 2:
        return flat.view(mx.uint16).astype(mx.uint32)
    if size == 1:
        return flat.view(mx.uint8).astype(mx.uint32)
    return flat.view(mx.uint32)  # 8-byte types: both halves of every element


def _positions_mx(n: int, salt: int) -> Any:
    """A pseudo-random uint32 key per position: kept per size up to 64M positions (most of the hash's work for the
    outputs fingerprinted after every timed call), made anew for larger arrays (inputs of GBs, fingerprinted rarely)."""
    import mlx.core as mx

    key = (n, salt)
    if key in _positions:
        return _positions[key]
    u32, array = mx.uint32, _op("array")
    i = _op("arange")(n, dtype=u32) * array(_M0, u32) + array((salt * _M3 + 1) & 0xFFFFFFFF, u32)
    i = (i ^ (i >> 15)) * array(_M2, u32)
    if n <= (64 << 20):
        _op("eval")(i)
        while len(_positions) >= 16:
            _positions.pop(next(iter(_positions)))
        _positions[key] = i
    return i


def lanes_mx(words: Any, keys: Any) -> Any:
    """Both lanes over the last axis of `words` mixed with their position keys (_positions_mx): elementwise work and
    two sums, nothing cached, so that it can also run inside `mx.compile` (benchmarks/between_runs.py)."""
    import mlx.core as mx

    u32, array, total = mx.uint32, _op("array"), _op("sum")
    h = (words ^ keys) * array(_M1, u32)
    h = h ^ (h >> 15)
    return _op("stack")([total(h, axis=-1), total(h * array(_M3, u32), axis=-1)], axis=-1)


def _mix_mx(words: Any, salt: int) -> Any:
    """Both lanes over the last axis of `words` (flat words: shape (2,); a run's stacked words: one pair a row)."""
    return lanes_mx(words, _positions_mx(words.shape[-1], salt))


def fingerprint_mx(arrays: Any) -> Any:
    """Two uint32 lanes over the bits of one array or a sequence of arrays (each salted by its position), as a lazy MLX
    array of shape (2,): evaluate it with whatever else is being evaluated."""
    import mlx.core as mx

    seq = list(arrays) if isinstance(arrays, (list, tuple)) else [arrays]
    total = _op("zeros")((2,), dtype=mx.uint32)
    for k, a in enumerate(seq):
        total = total + _mix_mx(_words_mx(a), k)
    return total


#: A run's outputs are stacked for their fingerprints up to this many elements in all (a few hundred MB of words and
#: temporaries); larger ones are fingerprinted call by call, where their own size makes the operations' count moot.
STACK_MAX_ELEMENTS = 1 << 26


def _alike(calls: list[tuple[Any, ...]]) -> bool:
    """Whether every call returned MLX arrays of the same count, shapes and dtypes (what fingerprints_mx can stack)."""
    import mlx.core as mx

    first = calls[0]
    return all(len(c) == len(first) and all(isinstance(a, mx.array) and isinstance(b, mx.array) and a.shape == b.shape
                                            and a.dtype == b.dtype for a, b in zip(c, first, strict=True))
               for c in calls)


def fingerprints_mx(calls: list[tuple[Any, ...]]) -> Any:
    """fingerprint_mx of each call's outputs, as a lazy uint32 array of shape (len(calls), 2): the same lanes, taken
    for a run's calls together (about ten device operations per output rather than per call and output; per call, a
    fingerprint's operations cost about as much as a short timed call on the H200). Calls whose outputs differ in
    count, shape or dtype are fingerprinted one by one."""
    import mlx.core as mx

    if not calls:
        return _op("zeros")((0, 2), dtype=mx.uint32)
    stack = _op("stack")
    if len(calls) == 1 or not _alike(calls) or len(calls) * sum(a.size for a in calls[0]) > STACK_MAX_ELEMENTS:
        return stack([fingerprint_mx(c) for c in calls])
    lanes = _op("zeros")((len(calls), 2), dtype=mx.uint32)
    for k in range(len(calls[0])):
        lanes = lanes + _mix_mx(_words_mx(stack([c[k].reshape(-1) for c in calls]), rows=True), k)
    return lanes


def fingerprint_hex(lanes: Any) -> str:
    a, b = (int(v) & 0xFFFFFFFF for v in lanes)
    return f"{a:08x}{b:08x}"


def digest_inputs_mx(arrays: dict[str, Any]) -> dict[str, str]:
    """Fingerprints of named MLX arrays, computed on their device; shape and dtype are part of each."""
    lanes = {name: fingerprint_mx(v) for name, v in arrays.items()}
    _op("eval")(list(lanes.values()))
    return {name: f"{v.dtype}{tuple(v.shape)}:" + fingerprint_hex(lanes[name].tolist())
            for name, v in arrays.items()}


#: Host fingerprints run over chunks whose temporaries stay in the CPU's cache, with each size's position keys kept
#: (up to _POSITIONS_NP_MAX_BYTES in all): 0.04 s for a 4096 x 4096 float16 output against 0.30 s for whole-array
#: passes on the 2-core CPU; the parent checks one for every timed call it judges.
_CHUNK = 1 << 16
_POSITIONS_NP_MAX_BYTES = 256 << 20
_position_keys_np: dict[tuple[int, int], np.ndarray] = {}


def _positions_np(start: int, stop: int, salt: int, n: int) -> np.ndarray:
    """_positions_mx's keys for positions [start, stop) of an n-word array."""
    cached = _position_keys_np.get((n, salt))
    if cached is not None:
        return cached[start:stop]
    keep = n * 4 <= _POSITIONS_NP_MAX_BYTES
    lo, hi = (0, n) if keep else (start, stop)
    with np.errstate(over="ignore"):
        i = np.arange(lo, hi, dtype=np.uint32) * np.uint32(_M0) + np.uint32((salt * _M3 + 1) & 0xFFFFFFFF)
        i ^= i >> np.uint32(15)
        i *= np.uint32(_M2)
    if not keep:
        return i
    while _position_keys_np and sum(v.nbytes for v in _position_keys_np.values()) + i.nbytes > _POSITIONS_NP_MAX_BYTES:
        _position_keys_np.pop(next(iter(_position_keys_np)))
    _position_keys_np[(n, salt)] = i
    return i[start:stop]


def _words_np(a: np.ndarray) -> np.ndarray:
    """The array's words as _words_mx makes them, before widening: 4- and 8-byte types as uint32 views (8-byte
    elements give two words each), narrower ones as their own unsigned type (widened a chunk at a time)."""
    flat = np.ascontiguousarray(a).reshape(-1)
    if flat.dtype == np.bool_:
        return flat.view(np.uint8)
    return flat.view({8: np.uint32, 4: np.uint32, 2: np.uint16, 1: np.uint8}[flat.dtype.itemsize])


def fingerprint_numpy(arrays: list[np.ndarray]) -> str:
    """fingerprint_mx of the same bits, on the host (raw bits: bfloat16 as its uint16 words, see raw_bits). Both lanes
    are sums modulo 2**32, so each chunk is summed in uint32 with wraparound."""
    from ksearch.harness.host_threads import over_slabs

    lanes = [0, 0]
    for k, a in enumerate(arrays):
        words = _words_np(a)
        _positions_np(0, 0, k, words.size)  # made (and kept) once, before the threads read it
        for s0, s1 in over_slabs(words.size, functools.partial(_lanes_np, words, k), align=_CHUNK):
            lanes[0] += s0
            lanes[1] += s1
    return fingerprint_hex([lanes[0] & 0xFFFFFFFF, lanes[1] & 0xFFFFFFFF])


def _lanes_np(words: np.ndarray, salt: int, lo: int, hi: int) -> tuple[int, int]:
    """Both lanes over words[lo:hi], a chunk at a time (narrow words widened per chunk)."""
    m1, m3, shift = np.uint32(_M1), np.uint32(_M3), np.uint32(15)
    s0 = s1 = 0
    with np.errstate(over="ignore"):
        for start in range(lo, hi, _CHUNK):
            stop = min(hi, start + _CHUNK)
            h = words[start:stop].astype(np.uint32)  # a copy in every case: the arithmetic below is in place
            h ^= _positions_np(start, stop, salt, words.size)
            h *= m1
            h ^= h >> shift
            s0 += int(h.sum(dtype=np.uint32))
            h *= m3
            s1 += int(h.sum(dtype=np.uint32))
    return s0, s1


def raw_bits(x: Any) -> np.ndarray:
    """An MLX array's exact bits as NumPy: bfloat16 (which NumPy lacks) as its uint16 words, everything else as is."""
    import mlx.core as mx

    if x.dtype == mx.bfloat16:
        x = x.view(mx.uint16)
    return np.array(x, copy=False)


def from_raw_bits(a: np.ndarray, dtype: str) -> np.ndarray:
    """Values of raw_bits' output (bfloat16 widened exactly to float32)."""
    if dtype == "bfloat16" and a.dtype == np.uint16:
        return (a.astype(np.uint32) << np.uint32(16)).view(np.float32)
    return a
