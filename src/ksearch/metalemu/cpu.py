"""The CPU engine of the Metal emulation: run one MSL kernel on numpy buffers.

    from ksearch.metalemu.cpu import run_kernel
    run_kernel(source, kernel_name, buffers, grid, threadgroup, *, threadgroup_memory_limit=32768,
               checks=True, workers=None) -> None

source       a complete MSL translation unit as mx.fast.metal_kernel builds it (see translate.py); optional
             `#include <metal_stdlib>` / `using namespace metal;` lines are accepted, MLX's preamble names
             (float16_t, bfloat16_t, Limits, elem_to_loc, ...) are provided.
kernel_name  the instantiation's host name (`custom_kernel_x_float_float` for a template kernel), or the function
             name of a kernel that is not a template (or whose only instantiation it is).
buffers      numpy arrays in [[buffer(i)]] order; outputs are written in place (they must be C-contiguous and
             writeable); read-only inputs that are not C-contiguous are copied. A `constant T&` parameter takes a
             0-d or 1-element array. bfloat16 data is any 2-byte array (uint16 bits, or ml_dtypes' bfloat16).
grid         threads per axis (dispatchThreads): the last threadgroup of an axis is smaller where the grid is not a
             multiple of the threadgroup, and its threads_per_threadgroup says so, as on Metal.
threadgroup  threads per threadgroup per axis, clamped to the grid per axis as MLX does; at most 1024 threads.
checks       False turns the threadgroup-memory shadow checks off (device bounds stay checked).
workers      OS threads running threadgroups at once (default $KSEARCH_EMU_THREADS, else up to 2).

Raises ksearch.errors.MetalEmuError: status 'compile_error' for what is static (an unsupported construct,
threadgroup memory past the limit, code clang rejects), 'runtime_error' for what a run caught (out-of-bounds
access, race or uninitialised read on threadgroup memory, a barrier not all threads reach, a shuffle from outside
the simdgroup, a bad buffer). `line` is the line in `source`, `body_line` the line within the kernel's body.
Needs clang++ (and addr2line or llvm-symbolizer for the lines of memory errors).
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from ksearch.errors import MetalEmuError
from ksearch.metalemu import launch
from ksearch.metalemu.compile import Library, build, core_library
from ksearch.metalemu.translate import FILE_TAG, Entry

MAX_THREADS_PER_THREADGROUP = 1024
_KIND_NAME = {1: "float", 2: "int", 3: "uint", 4: "bool", 5: "half", 6: "bfloat"}
_NUMPY_KIND = {1: "f", 2: "i", 3: "u", 4: "b", 5: "f"}


def default_workers() -> int:
    env = os.environ.get("KSEARCH_EMU_THREADS", "")
    if env.isdigit() and int(env) > 0:
        return int(env)
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:
        cores = os.cpu_count() or 1
    return max(1, min(2, cores))


def _dims(value: Any, what: str) -> tuple[int, int, int]:
    try:
        dims = tuple(int(v) for v in value)
    except (TypeError, ValueError) as e:
        raise MetalEmuError(f"{what} must be three integers, got {value!r}") from e
    if len(dims) != 3 or any(d < 0 for d in dims):
        raise MetalEmuError(f"{what} must be three non-negative integers, got {value!r}")
    return dims  # type: ignore[return-value]


def _type_name(code: int) -> str:
    kind, size = code & 0xFF, (code >> 8) & 0xFF
    base = _KIND_NAME.get(kind)
    if base is None:
        return f"a {size}-byte type"
    if kind in (2, 3) and size != 4:
        base = {1: "char", 2: "short", 8: "long"}.get(size, base)
        base = ("u" + base) if kind == 3 else base
    return ("atomic<" + base + ">") if code & 0x10000 else base


def _compatible(code: int, dtype: np.dtype) -> bool:
    kind, size = code & 0xFF, (code >> 8) & 0xFF
    if dtype.itemsize != size:
        return False
    if kind == 6:  # bfloat: numpy has no such dtype; accept any 2-byte one
        return True
    if kind == 0:  # a struct: any bytes of the right size
        return True
    want = _NUMPY_KIND.get(kind)
    if kind in (2, 3) and dtype.kind in ("i", "u"):
        return True  # signedness is a matter of interpretation, as on the GPU
    if kind == 4:
        return dtype.kind in ("b", "u", "i")
    return dtype.kind == want


ALIGN = 64  # Metal buffers start aligned; vector types need at least 16


def _aligned(arr: np.ndarray) -> np.ndarray:
    """`arr` itself when it starts on a 64-byte boundary, else an aligned C-contiguous copy."""
    if arr.ctypes.data % ALIGN == 0 and arr.flags.c_contiguous:
        return arr
    raw = np.empty(arr.nbytes + ALIGN, np.uint8)
    off = (-raw.ctypes.data) % ALIGN
    out = raw[off:off + arr.nbytes].view(arr.dtype).reshape(arr.shape)
    out[...] = arr
    return out


def _prepare(entry: Entry, lib: Library, buffers: list[Any]
             ) -> tuple[list[tuple[int, int]], list[Any], list[tuple[np.ndarray, np.ndarray]]]:
    params = [p for p in entry.kernel.params if p.kind == "buffer"]
    need = 1 + max((p.index for p in params), default=-1)
    if len(buffers) < need:
        raise MetalEmuError(f"{entry.name}: the kernel binds {need} buffers, {len(buffers)} given",
                            kernel=entry.name, kind="arguments")
    desc = launch.describe(launch.load_kernel_library(lib.path), entry.index, max(need, 1))
    names = {p.index: p.name for p in params}
    keep: list[Any] = []
    bufs: list[tuple[int, int]] = []
    back: list[tuple[np.ndarray, np.ndarray]] = []  # (caller's output, aligned copy the kernel writes)
    for i, b in enumerate(buffers):
        arr = np.asarray(b)
        if i >= need or desc[i][0] == 0:
            keep.append(arr)
            bufs.append((arr.ctypes.data if arr.size else 0, arr.nbytes))
            continue
        kind, code, writable = desc[i]
        label = f"{entry.name}: buffer {i} (`{names.get(i, '?')}`)"
        if not _compatible(code, arr.dtype):
            raise MetalEmuError(f"{label} is declared {_type_name(code)} but the array is {arr.dtype}",
                                kernel=entry.name, kind="arguments")
        if kind == 2 and arr.nbytes < ((code >> 8) & 0xFF):
            raise MetalEmuError(f"{label} is a reference to one {_type_name(code)} but the array is empty",
                                kernel=entry.name, kind="arguments")
        if writable and (not arr.flags.c_contiguous or not arr.flags.writeable or arr is not b):
            raise MetalEmuError(f"{label} is written by the kernel: pass a C-contiguous, writeable numpy array",
                                kernel=entry.name, kind="arguments")
        work = _aligned(arr) if arr.size else arr
        if writable and work is not arr:
            back.append((arr, work))
        keep.append(work)
        bufs.append((work.ctypes.data if work.size else 0, work.nbytes))
    return bufs, keep, back


def _error(f: launch.Failure, entry: Entry, lib: Library, source: str) -> MetalEmuError:
    line = f.line or next(iter(launch.source_lines(lib.path, f.pc, FILE_TAG)), 0) or None
    k = entry.kernel
    body = line - k.body_line if line and k.body_line < line <= k.end_line else None
    msg = f.message
    if f.buf >= 0:
        name = next((p.name for p in k.params if p.kind == "buffer" and p.index == f.buf), "?")
        msg = f"buffer {f.buf} (`{name}`): {msg}"
    if f.pc2:
        second = next(iter(launch.source_lines(lib.path, f.pc2, FILE_TAG)), 0)
        if second:
            msg += f"; the earlier access is at line {second}"
    lines = source.splitlines()
    text = lines[line - 1].strip()[:160] if line and line <= len(lines) else ""
    where = f"line {line}: " if line else ""
    ctx = f" [{text}]" if text else ""
    pos = f" (threadgroup {f.group}, thread {f.thread} in it)"
    return MetalEmuError(f"{entry.name}: {where}{msg}{ctx}{pos}", status="runtime_error", kernel=entry.name,
                         line=line, body_line=body, kind=f.kind)


def run_kernel(source: str, kernel_name: str, buffers: list[Any], grid: tuple[int, int, int],
               threadgroup: tuple[int, int, int], *, threadgroup_memory_limit: int = 32768, checks: bool = True,
               workers: int | None = None) -> None:
    """Runs `kernel_name` of `source` over `grid` threads; see the module docstring."""
    g = _dims(grid, "grid")
    tg = _dims(threadgroup, "threadgroup")
    if any(d == 0 for d in tg):
        raise MetalEmuError(f"threadgroup must have at least one thread per axis, got {tg}", kind="arguments")
    lib = build(source, threadgroup_memory_limit)
    entry = lib.translation.entry(kernel_name)
    if entry is None:
        names = ", ".join(e.name for e in lib.translation.entries) or "none"
        raise MetalEmuError(f"no kernel {kernel_name!r} in the source (runnable: {names})", status="compile_error",
                            kernel=kernel_name)
    size = tg[0] * tg[1] * tg[2]
    if size > MAX_THREADS_PER_THREADGROUP:
        raise MetalEmuError(f"{entry.name}: threadgroup {tg} has {size} threads, more than the maximum of "
                            f"{MAX_THREADS_PER_THREADGROUP} per threadgroup", kernel=entry.name, kind="arguments")
    if any(d == 0 for d in g):
        return
    tg = (min(tg[0], g[0]), min(tg[1], g[1]), min(tg[2], g[2]))  # MLX dispatches min(threadgroup, grid)
    launch.load_core(core_library())
    bufs, keep, back = _prepare(entry, lib, buffers)
    lib_handle = launch.load_kernel_library(lib.path)
    failure = launch.run(lib_handle, entry.index, bufs, g, tg, fibers=lib.translation.fibers, checks=checks,
                         tg_limit=threadgroup_memory_limit, workers=workers or default_workers())
    for out, work in back:
        out[...] = work
    del keep
    if failure is not None:
        raise _error(failure, entry, lib, source)
