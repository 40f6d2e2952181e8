"""Running a compiled kernel library: the ctypes mirror of runtime/ks_abi.h, the worker threads, error decoding.

The scheduler core (`core.cpp`, one shared library per compiler and runtime version) is loaded with RTLD_GLOBAL
before any kernel library, whose undefined `ks_*` symbols it provides. A launch is a `Launch` record (buffers,
grid, threadgroup, entry point); `ks_run` is called from `workers` Python threads at once (ctypes releases the GIL),
each taking threadgroups from the shared counter. When several workers fail, the error of the lowest threadgroup
is reported, so that the message does not depend on the timing of the threads.
"""

from __future__ import annotations

import ctypes
import os
import shutil
import subprocess
import threading
from dataclasses import dataclass
from functools import cache
from pathlib import Path

MAX_BUFS = 64

# Error codes (ks_abi.h).
ERR_DEVICE_OOB, ERR_MISALIGNED, ERR_TG_OOB, ERR_TG_UNINIT, ERR_TG_RACE = 1, 2, 3, 4, 5
ERR_BARRIER, ERR_SHUFFLE, ERR_MATRIX, ERR_ARGS, ERR_NULL, ERR_INTERNAL, ERR_PRIVATE_OOB = 6, 7, 8, 9, 10, 11, 12
ERROR_KIND = {
    ERR_DEVICE_OOB: "out_of_bounds", ERR_MISALIGNED: "misaligned", ERR_TG_OOB: "threadgroup_out_of_bounds",
    ERR_TG_UNINIT: "uninitialized_threadgroup_read", ERR_TG_RACE: "threadgroup_race", ERR_BARRIER: "barrier_divergence",
    ERR_SHUFFLE: "shuffle_lane", ERR_MATRIX: "simdgroup_matrix", ERR_ARGS: "arguments", ERR_NULL: "null_pointer",
    ERR_INTERNAL: "internal", ERR_PRIVATE_OOB: "private_out_of_bounds",
}


class Buf(ctypes.Structure):
    _fields_ = [("ptr", ctypes.c_void_p), ("bytes", ctypes.c_int64)]


ENTRY = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p)


class Launch(ctypes.Structure):
    _fields_ = [
        ("bufs", Buf * MAX_BUFS), ("nbufs", ctypes.c_int64), ("ngroups", ctypes.c_int64), ("next", ctypes.c_int64),
        ("grid", ctypes.c_uint32 * 3), ("tg", ctypes.c_uint32 * 3), ("stop", ctypes.c_int32),
        ("checks", ctypes.c_int32), ("fibers", ctypes.c_int32), ("tg_limit", ctypes.c_int32),
        ("entry", ctypes.c_void_p),
    ]


class Err(ctypes.Structure):
    _fields_ = [
        ("code", ctypes.c_int32), ("line", ctypes.c_int32), ("pc", ctypes.c_int64), ("group", ctypes.c_int64),
        ("gpos", ctypes.c_uint32 * 3), ("tpos", ctypes.c_uint32 * 3), ("buf", ctypes.c_int32), ("pad", ctypes.c_int32),
        ("pc2", ctypes.c_int64), ("msg", ctypes.c_char * 1024),
    ]


@dataclass
class Failure:
    """One failed launch, as the runtime reported it (the caller maps it to MetalEmuError)."""

    code: int
    line: int  # MSL line when the runtime knew it, else 0
    pc: int  # return address inside the kernel library (relative), 0 when none
    group: tuple[int, int, int]
    thread: tuple[int, int, int]
    buf: int
    message: str
    pc2: int = 0  # the earlier access of a race, when known (0: none)

    @property
    def kind(self) -> str:
        return ERROR_KIND.get(self.code, "internal")


_core_lock = threading.Lock()
_loaded: dict[str, ctypes.CDLL] = {}


def load_core(path: Path) -> None:
    """Loads the scheduler core once per process, globally, so that kernel libraries resolve against it."""
    with _core_lock:
        if "core" in _loaded:
            return
        _loaded["core"] = ctypes.CDLL(str(path), mode=ctypes.RTLD_GLOBAL)


def load_kernel_library(path: Path) -> ctypes.CDLL:
    key = str(path)
    with _core_lock:
        lib = _loaded.get(key)
        if lib is None:
            lib = _loaded[key] = ctypes.CDLL(key)
        return lib


def describe(lib: ctypes.CDLL, entry: int, nbufs: int) -> list[tuple[int, int, int]]:
    """(kind 1 pointer / 2 reference / 0 unused, element type code, writable) per buffer index."""
    out = (ctypes.c_int * (3 * max(nbufs, 1)))()
    getattr(lib, f"ks_desc_{entry}")(out)
    return [(out[3 * i], out[3 * i + 1], out[3 * i + 2]) for i in range(nbufs)]


def run(lib: ctypes.CDLL, entry: int, bufs: list[tuple[int, int]], grid: tuple[int, int, int],
        tg: tuple[int, int, int], *, fibers: bool, checks: bool, tg_limit: int, workers: int) -> Failure | None:
    core = _loaded["core"]
    launch = Launch()
    for i, (ptr, nbytes) in enumerate(bufs):
        launch.bufs[i].ptr = ptr
        launch.bufs[i].bytes = nbytes
    launch.nbufs = len(bufs)
    groups = [(g + t - 1) // t for g, t in zip(grid, tg, strict=True)]
    launch.ngroups = groups[0] * groups[1] * groups[2]
    launch.next = 0
    launch.grid[:] = grid
    launch.tg[:] = tg
    launch.checks = int(checks)
    launch.fibers = int(fibers)
    launch.tg_limit = tg_limit
    launch.entry = ctypes.cast(getattr(lib, f"ks_entry_{entry}"), ctypes.c_void_p).value
    ks_run = core.ks_run
    ks_run.argtypes = [ctypes.POINTER(Launch), ctypes.POINTER(Err)]
    ks_run.restype = ctypes.c_int
    n = max(1, min(workers, launch.ngroups))
    errs = [Err() for _ in range(n)]
    codes = [0] * n
    if n == 1:
        codes[0] = ks_run(ctypes.byref(launch), ctypes.byref(errs[0]))
    else:
        def work(i: int) -> None:
            codes[i] = ks_run(ctypes.byref(launch), ctypes.byref(errs[i]))

        threads = [threading.Thread(target=work, args=(i,), daemon=True) for i in range(n)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    failed = [errs[i] for i in range(n) if codes[i]]
    if not failed:
        return None
    e = min(failed, key=lambda x: x.group)
    return Failure(e.code, e.line, e.pc, tuple(e.gpos), tuple(e.tpos), e.buf,  # type: ignore[arg-type]
                   e.msg.decode(errors="replace"), e.pc2)


@cache
def _symbolizer() -> list[str] | None:
    for name in ("llvm-symbolizer", "llvm-symbolizer-17", "llvm-symbolizer-16", "llvm-symbolizer-15",
                 "llvm-symbolizer-14"):
        path = shutil.which(name)
        if path:
            return [path, "--inlining", "--no-demangle", "--functions=none"]
    path = shutil.which("addr2line")
    return [path, "-i"] if path else None


def source_lines(library: Path, pc: int, file_tag: str) -> list[int]:
    """The lines of `file_tag` (the MSL source's name in #line directives) on the inline chain at `pc`, innermost
    first; empty when no symbolizer is installed or the address has no line."""
    tool = _symbolizer()
    if tool is None or pc <= 0:
        return []
    addr = hex(pc - 1)  # the return address follows the call; the call itself carries the line
    cmd = tool + (["--obj", str(library), addr] if "symbolizer" in os.path.basename(tool[0])
                  else ["-e", str(library), addr])
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.TimeoutExpired):
        return []
    lines = []
    for raw in out.splitlines():
        path, _, rest = raw.strip().rpartition(":")
        if not path:
            continue
        if ":" in path and rest.isdigit() and not path.endswith(file_tag):  # llvm-symbolizer: file:line:col
            path, _, rest = path.rpartition(":")
        if path.endswith(file_tag) and rest.split(" ")[0].isdigit():
            lines.append(int(rest.split(" ")[0]))
    return lines
