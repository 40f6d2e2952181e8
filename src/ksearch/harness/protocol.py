"""Length-prefixed frames between the parent and a worker: a JSON header plus raw array buffers.

No pickle: the parent never unpickles what an untrusted worker sends, so a candidate cannot run code in the judge.
"""

from __future__ import annotations

import json
import select
import socket
import struct
import time
from typing import Any

import numpy as np

from ksearch.errors import Deadline, ProtocolError

_LEN = struct.Struct(">Q")
MAX_HEADER = 8 << 20

#: During a batch of timed calls the worker sends one fixed-size record per call (a commitment: the call's index and
#: the two lanes of its outputs' fingerprint), then an end record, then the batch's ordinary reply frame.
COMMIT = struct.Struct(">4sIII")
COMMIT_MAGIC = b"KSCM"
END_MAGIC = b"KSEN"


def pack_arrays(arrays: dict[str, np.ndarray]) -> tuple[list[dict[str, Any]], list[bytes]]:
    meta, bufs = [], []
    for name, a in arrays.items():
        a = np.ascontiguousarray(a)
        meta.append({"name": name, "dtype": a.dtype.str, "shape": list(a.shape), "nbytes": a.nbytes})
        bufs.append(a.tobytes())
    return meta, bufs


def pack_arrays_views(arrays: dict[str, np.ndarray]) -> tuple[list[dict[str, Any]], list[memoryview]]:
    meta, bufs = [], []
    for name, a in arrays.items():
        a = np.ascontiguousarray(a)
        meta.append({"name": name, "dtype": a.dtype.str, "shape": list(a.shape), "nbytes": a.nbytes})
        bufs.append(memoryview(a.reshape(-1).view(np.uint8)))  # type: ignore[arg-type]
    return meta, bufs


def send(sock: socket.socket, header: dict[str, Any], arrays: dict[str, np.ndarray] | None = None) -> None:
    # Buffers go out without a copy (outputs of tens of MB, several per workload).
    meta, bufs = pack_arrays_views(arrays or {})
    body = json.dumps({**header, "_arrays": meta}).encode()
    sock.sendall(_LEN.pack(len(body)) + body)
    for b in bufs:
        sock.sendall(b)


def _recv_exact(sock: socket.socket, n: int, deadline: float | None, poll: Any) -> bytearray:
    buf = bytearray(n)
    view = memoryview(buf)
    got = 0
    while got < n:
        if deadline is not None:
            while True:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise Deadline("timed out waiting for the worker")
                ready, _, _ = select.select([sock], [], [], min(0.2, remaining))
                if ready:
                    break
                if poll is not None:
                    poll()
        k = sock.recv_into(view[got:], min(n - got, 1 << 24))
        if not k:
            raise ProtocolError("worker closed the channel")
        got += k
    return buf


_ALLOWED_DTYPES = {"<f4", "<f2", "<f8", "<i4", "<i8", "<u4", "|b1", "|u1", "|i1", "<u2", "<i2", "<u8"}


def recv(
    sock: socket.socket, deadline: float | None = None, max_bytes: int = 1 << 36, poll: Any = None
) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """One frame. `poll` is called while waiting (the parent checks memory and liveness there)."""
    (n,) = _LEN.unpack(_recv_exact(sock, _LEN.size, deadline, poll))
    if n > MAX_HEADER:
        raise ProtocolError(f"frame header of {n} bytes is too large")
    try:
        header = json.loads(_recv_exact(sock, n, deadline, poll))
    except json.JSONDecodeError as exc:
        raise ProtocolError(f"bad frame header: {exc}") from exc
    if not isinstance(header, dict):
        raise ProtocolError("frame header is not an object")
    arrays: dict[str, np.ndarray] = {}
    total = 0
    for m in header.pop("_arrays", []):
        try:
            dtype = np.dtype(m["dtype"])
            shape = tuple(int(s) for s in m["shape"])
            nbytes = int(m["nbytes"])
        except (KeyError, TypeError, ValueError) as exc:
            raise ProtocolError(f"bad array metadata: {exc}") from exc
        if dtype.str not in _ALLOWED_DTYPES or nbytes != int(np.prod(shape, dtype=np.int64)) * dtype.itemsize:
            raise ProtocolError("array metadata does not add up")
        total += nbytes
        if total > max_bytes:
            raise ProtocolError("worker sent more data than the outputs can hold")
        arrays[str(m["name"])] = np.frombuffer(_recv_exact(sock, nbytes, deadline, poll), dtype=dtype).reshape(shape)
    return header, arrays
