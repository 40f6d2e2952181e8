"""Test helper: run the CUDA translation of a Metal kernel on the CPU.

The translated kernel, wrapped as mx.fast.cuda_kernel wraps it, is compiled as host C++ against
ksearch/metalemu/cuda_host.h (one OS thread per CUDA thread, real block and warp barriers, exited threads leave
them) and called through ctypes. This runs the very text the CUDA engine hands to NVRTC, so the translation and the
device library are checked against NumPy without a GPU.
"""

from __future__ import annotations

import ctypes
import hashlib
import subprocess
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ksearch.metalemu.cuda_check import HOST_HEADER, host_compiler, wrapped
from ksearch.metalemu.cuda_kernel import Arg, MetalKernelTranslation, plan_launch

NP = {"float32": np.float32, "float16": np.float16, "int32": np.int32, "uint32": np.uint32, "int64": np.int64,
      "uint64": np.uint64, "int16": np.int16, "uint16": np.uint16, "int8": np.int8, "uint8": np.uint8, "bool": np.bool_,
      "bfloat16": np.uint16}
CACHE = Path(tempfile.gettempdir()) / "ksearch_metalemu_host"
GUARD = 64  # elements after each output that the kernel must not touch
_LOADED: dict[str, ctypes.CDLL] = {}


def bf16(x: np.ndarray) -> np.ndarray:
    """float32 -> bfloat16 bit patterns (round to nearest even), as uint16."""
    u = np.asarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)


def from_bf16(b: np.ndarray) -> np.ndarray:
    return (b.astype(np.uint32) << 16).view(np.float32)


def _dtype_name(a: np.ndarray) -> str:
    for name, t in NP.items():
        if name != "bfloat16" and a.dtype == np.dtype(t):
            return name
    raise TypeError(f"no Metal dtype for {a.dtype}")


def _library(text: str, kernel: str) -> ctypes.CDLL:
    key = hashlib.sha256(text.encode()).hexdigest()[:20]
    if key in _LOADED:
        return _LOADED[key]
    CACHE.mkdir(parents=True, exist_ok=True)
    so = CACHE / f"{kernel}_{key}.so"
    if not so.exists():
        cpp = CACHE / f"{kernel}_{key}.cpp"
        cpp.write_text(text)
        cxx = host_compiler()
        assert cxx, "no host C++ compiler"
        proc = subprocess.run([cxx, "-std=c++20", "-O1", "-shared", "-fPIC", "-pthread", "-w", "-include",
                               str(HOST_HEADER), "-o", str(so) + ".tmp", str(cpp)], capture_output=True, text=True)
        if proc.returncode != 0:
            raise RuntimeError(f"host compile failed:\n{proc.stderr[-6000:]}")
        Path(str(so) + ".tmp").rename(so)
    _LOADED[key] = ctypes.CDLL(str(so))
    return _LOADED[key]


def run_metal(name: str, input_names: Sequence[str], output_names: Sequence[str], source: str, header: str = "", *,
              inputs: Sequence[Any], output_shapes: Sequence[Sequence[int]], output_dtypes: Sequence[str],
              grid: Sequence[int], threadgroup: Sequence[int], template: Sequence[tuple[str, Any]] = (),
              init_value: float | None = None, atomic_outputs: bool = False,
              ensure_row_contiguous: bool = True) -> list[np.ndarray]:
    """Run a Metal kernel (mx.fast.metal_kernel's arguments, NumPy arrays) through the CUDA translation on the host.

    An input given as ("bfloat16", uint16 array) is a bfloat16 array; bfloat16 outputs come back as uint16 bits."""
    tr = MetalKernelTranslation(name, input_names, output_names, source, header, atomic_outputs)
    arrays, args = [], []
    for n, x in zip(input_names, inputs, strict=True):
        if isinstance(x, tuple):
            dtype, a = x[0], np.ascontiguousarray(x[1])
        else:
            a = np.asarray(x)
            if ensure_row_contiguous or not (a.flags.c_contiguous or (a.ndim and min(a.strides) > 0)):
                a = np.ascontiguousarray(a)  # a view with positive strides is passed as it is (its strides too)
            dtype = _dtype_name(a)
        arrays.append(a)
        args.append(Arg(n, dtype, a.ndim))
    src = tr.cuda_source(args, list(output_dtypes), list(template))
    text = wrapped(src, [a.dtype for a in args], list(output_dtypes))
    launch = plan_launch(grid, threadgroup)
    calls, k = [], 0
    for i, a in enumerate(args):
        from ksearch.backends.nvcc import ctype

        calls.append(f"(const {ctype(a.dtype, 'float32')}*)bufs[{k}]")
        k += 1
        cname = src.input_names[i]
        for suffix, maker in (("_shape", "sh"), ("_strides", "st"), ("_ndim", "nd")):
            if f"{cname}{suffix}" in src.source:
                calls.append(f"{maker}({i})")
    calls.append(f"(const int32_t*)bufs[{k}]")
    k += 1
    for j, d in enumerate(output_dtypes):
        from ksearch.backends.nvcc import ctype

        calls.append(f"({ctype(d, 'float32')}*)bufs[{k + j}]")
    text = text + f"""
extern "C" void ks_run(void** bufs, const int* shapes, const long long* strides, const int* ndims, unsigned gx,
                       unsigned gy, unsigned threads) {{
  using namespace mlx::core::cu;
  auto sh = [&](int i) {{ Shape s{{}}; for (int d = 0; d < MAX_NDIM; ++d) s[d] = shapes[MAX_NDIM * i + d]; return s; }};
  auto st = [&](int i) {{ Strides s{{}}; for (int d = 0; d < MAX_NDIM; ++d) s[d] = strides[MAX_NDIM * i + d]; return s; }};
  auto nd = [&](int i) {{ return ndims[i]; }};
  ks_host::launch(ks_dim3{{gx, gy, 1}}, ks_dim3{{threads, 1, 1}}, [&] {{ custom_kernel_{src.name}({", ".join(calls)}); }});
}}
"""
    lib = _library(text, name)
    outs, backing = [], []
    for shape, d in zip(output_shapes, output_dtypes, strict=True):
        n = int(np.prod(shape))
        b = np.empty(n + GUARD, dtype=NP[d])  # a guard zone after each output catches writes past its end
        b.view(np.uint8)[...] = 0xA5  # outputs start as garbage, as in MLX
        if init_value is not None:
            b[:n] = bf16(np.float32(init_value)) if d == "bfloat16" else init_value
        backing.append(b)
        outs.append(b[:n].reshape(tuple(shape)))
    meta = np.array([*launch.grid, *launch.threadgroup], dtype=np.int32)
    bufs = [*arrays, meta, *backing]
    ptrs = (ctypes.c_void_p * len(bufs))(*[b.ctypes.data for b in bufs])
    shapes = np.zeros((len(arrays), 10), dtype=np.int32)
    strides = np.zeros((len(arrays), 10), dtype=np.int64)
    for i, a in enumerate(arrays):
        shapes[i, :a.ndim] = a.shape
        strides[i, :a.ndim] = [s // a.itemsize for s in a.strides]
    ndims = np.array([a.ndim for a in arrays] or [0], dtype=np.int32)
    threads = launch.cuda_threadgroup[0]
    lib.ks_run(ptrs, shapes.ctypes.data_as(ctypes.c_void_p), strides.ctypes.data_as(ctypes.c_void_p),
               ndims.ctypes.data_as(ctypes.c_void_p), ctypes.c_uint(launch.cuda_grid[0] // threads),
               ctypes.c_uint(launch.cuda_grid[1]), ctypes.c_uint(threads))
    for name, o, b in zip(output_names, outs, backing, strict=True):
        if not (b[o.size:].view(np.uint8) == 0xA5).all():
            raise AssertionError(f"kernel {name!r} wrote past the end of output {name!r}")
    return [o.copy() for o in outs]


def _to_numpy(x: Any) -> Any:
    import mlx.core as mx

    a = x if isinstance(x, mx.array) else mx.array(x)
    if a.dtype == mx.bfloat16:
        return ("bfloat16", np.array(a.view(mx.uint16)))
    return np.array(a)


def host_metal_kernel(name: str, input_names: Sequence[str], output_names: Sequence[str], source: str,
                      header: str = "", ensure_row_contiguous: bool = True, atomic_outputs: bool = False) -> Any:
    """An `mx.fast.metal_kernel` stand-in (MLX arrays in and out) that runs the CUDA translation on the host."""
    import mlx.core as mx

    MetalKernelTranslation(name, input_names, output_names, source, header, atomic_outputs)  # errors at build time

    def call(*, inputs: Sequence[Any], output_shapes: Sequence[Sequence[int]], output_dtypes: Sequence[Any],
             grid: Sequence[int], threadgroup: Sequence[int], template: Sequence[tuple[str, Any]] | None = None,
             init_value: float | None = None, verbose: bool = False, stream: Any = None) -> list[Any]:
        names = [str(d).rsplit(".", 1)[-1] for d in output_dtypes]
        tmpl = [(n, v if isinstance(v, bool | int) else str(v).rsplit(".", 1)[-1]) for n, v in (template or [])]
        outs = run_metal(name, input_names, output_names, source, header, inputs=[_to_numpy(x) for x in inputs],
                         output_shapes=output_shapes, output_dtypes=names, grid=grid, threadgroup=threadgroup,
                         template=tmpl, init_value=init_value, atomic_outputs=atomic_outputs,
                         ensure_row_contiguous=ensure_row_contiguous)
        return [mx.array(o).view(mx.bfloat16) if d == "bfloat16" else mx.array(o) for o, d in zip(outs, names, strict=True)]

    return call
