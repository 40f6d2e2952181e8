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
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ksearch.backends.nvcc import ctype, wrap
from ksearch.metalemu.cuda_check import HOST_HEADER, host_compiler
from ksearch.metalemu.cuda_kernel import Arg, MetalKernelTranslation, plan_launch

sys.path.insert(0, str(Path(__file__).parent))
from metalemu_cuda_cases import bf16  # noqa: E402

NP = {"float32": np.float32, "float16": np.float16, "int32": np.int32, "uint32": np.uint32, "int64": np.int64,
      "uint64": np.uint64, "int16": np.int16, "uint16": np.uint16, "int8": np.int8, "uint8": np.uint8, "bool": np.bool_,
      "bfloat16": np.uint16}
CACHE = Path(tempfile.gettempdir()) / "ksearch_metalemu_host"
GUARD = 64  # elements after each output that the kernel must not touch
_LOADED: dict[str, ctypes.CDLL] = {}


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


@dataclass
class Prepared:
    """One CUDA kernel call ready to compile and run: its C++ text (kernel + an extern "C" launcher) and buffers."""

    name: str
    output_names: list[str]
    text: str
    arrays: list[np.ndarray]
    output_shapes: list[tuple[int, ...]]
    output_dtypes: list[str]
    blocks: tuple[int, int, int]
    block: tuple[int, int, int]
    init_value: float | None


def prepare_cuda(name: str, source: str, header: str, inputs: Sequence[tuple[str, np.ndarray, str]],
                 outputs: Sequence[tuple[str, Sequence[int], str]], grid: Sequence[int], threadgroup: Sequence[int],
                 init_value: float | None = None) -> Prepared:
    """An mx.fast.cuda_kernel call: the kernel MLX generates (backends.nvcc.wrap) and MLX's launch (grid counts
    threads; blocks of min(tg, grid), ceil(grid / tg) of them)."""
    text = wrap(name, source, header, [(n, d) for n, _, d in inputs], [(n, d) for n, _, d in outputs])
    calls = []
    for i, (n, a, d) in enumerate(inputs):
        calls.append(f"(const {ctype(d, 'float32')}*)bufs[{i}]")
        for suffix, maker in (("_shape", "sh"), ("_strides", "st"), ("_ndim", "nd")):
            if a.ndim and f"{n}{suffix}" in source:
                calls.append(f"{maker}({i})")
    calls += [f"({ctype(d, 'float32')}*)bufs[{len(inputs) + j}]" for j, (_, _, d) in enumerate(outputs)]
    text += f"""
extern "C" void ks_run_{name}(void** bufs, const int* shapes, const long long* strides, const int* ndims,
                              unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz) {{
  using namespace mlx::core::cu;
  auto sh = [&](int i) {{ Shape s{{}}; for (int d = 0; d < MAX_NDIM; ++d) s[d] = shapes[MAX_NDIM * i + d]; return s; }};
  auto st = [&](int i) {{ Strides s{{}}; for (int d = 0; d < MAX_NDIM; ++d) s[d] = strides[MAX_NDIM * i + d]; return s; }};
  auto nd = [&](int i) {{ return ndims[i]; }};
  ks_host::launch(ks_dim3{{gx, gy, gz}}, ks_dim3{{bx, by, bz}}, [&] {{ custom_kernel_{name}({", ".join(calls)}); }});
}}
"""
    block = tuple(min(int(t), int(g)) for t, g in zip(threadgroup, grid, strict=True))
    blocks = tuple(-(-int(g) // int(t)) for t, g in zip(threadgroup, grid, strict=True))
    return Prepared(name, [n for n, _, _ in outputs], text, [a for _, a, _ in inputs],
                    [tuple(s) for _, s, _ in outputs], [d for _, _, d in outputs], blocks, block, init_value)  # type: ignore[arg-type]


def prepare(name: str, input_names: Sequence[str], output_names: Sequence[str], source: str, header: str = "", *,
            inputs: Sequence[Any], output_shapes: Sequence[Sequence[int]], output_dtypes: Sequence[str],
            grid: Sequence[int], threadgroup: Sequence[int], template: Sequence[tuple[str, Any]] = (),
            init_value: float | None = None, atomic_outputs: bool = False,
            ensure_row_contiguous: bool = True) -> Prepared:
    """mx.fast.metal_kernel's arguments (NumPy arrays; ("bfloat16", uint16 array) for bfloat16), translated by the
    CUDA engine and launched as it launches them."""
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
    launch = plan_launch(grid, threadgroup)
    meta = np.array([*launch.grid, *launch.threadgroup], dtype=np.int32)
    ins = [(n, a, arg.dtype) for n, a, arg in zip(src.input_names, [*arrays, meta], [*args, Arg("", "int32", 1)],
                                                   strict=True)]
    outs = [(n, s, d) for n, s, d in zip(src.output_names, output_shapes, output_dtypes, strict=True)]
    return prepare_cuda(src.name, src.source, src.header, ins, outs, launch.cuda_grid, launch.cuda_threadgroup,
                        init_value)


def execute(lib: ctypes.CDLL, p: Prepared) -> list[np.ndarray]:
    """Run a prepared call from a compiled library; a write past the end of an output is an AssertionError."""
    outs, backing = [], []
    for shape, d in zip(p.output_shapes, p.output_dtypes, strict=True):
        n = int(np.prod(shape))
        b = np.empty(n + GUARD, dtype=NP[d])  # a guard zone after each output catches writes past its end
        b.view(np.uint8)[...] = 0xA5  # outputs start as garbage, as in MLX
        if p.init_value is not None:
            b[:n] = bf16(np.float32(p.init_value)) if d == "bfloat16" else p.init_value
        backing.append(b)
        outs.append(b[:n].reshape(shape))
    bufs = [*p.arrays, *backing]
    ptrs = (ctypes.c_void_p * len(bufs))(*[b.ctypes.data for b in bufs])
    shapes = np.zeros((max(1, len(p.arrays)), 10), dtype=np.int32)
    strides = np.zeros((max(1, len(p.arrays)), 10), dtype=np.int64)
    for i, a in enumerate(p.arrays):
        shapes[i, :a.ndim] = a.shape
        strides[i, :a.ndim] = [s // a.itemsize for s in a.strides]
    ndims = np.array([a.ndim for a in p.arrays] or [0], dtype=np.int32)
    getattr(lib, f"ks_run_{p.name}")(ptrs, shapes.ctypes.data_as(ctypes.c_void_p),
                                     strides.ctypes.data_as(ctypes.c_void_p), ndims.ctypes.data_as(ctypes.c_void_p),
                                     *(ctypes.c_uint(v) for v in (*p.blocks, *p.block)))
    for name, o, b in zip(p.output_names, outs, backing, strict=True):
        if not (b[o.size:].view(np.uint8) == 0xA5).all():
            raise AssertionError(f"kernel {p.name!r} wrote past the end of output {name!r}")
    return [o.copy() for o in outs]


def run_many(calls: Sequence[Prepared]) -> list[list[np.ndarray]]:
    """Several prepared calls compiled as one library (one compiler start), then run one after another."""
    lib = _library("\n".join(c.text for c in calls), "_".join(sorted({c.name for c in calls}))[:60])
    return [execute(lib, c) for c in calls]


def run_metal(*args: Any, **kwargs: Any) -> list[np.ndarray]:
    """Run one Metal kernel call through the CUDA translation on the host (prepare's arguments)."""
    return run_many([prepare(*args, **kwargs)])[0]


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


def host_cuda_kernel(name: str, input_names: Sequence[str], output_names: Sequence[str], source: str,
                     header: str = "", ensure_row_contiguous: bool = True, shared_memory: int = 0) -> Any:
    """An `mx.fast.cuda_kernel` stand-in that runs the kernel on the host: what metal_kernel_via_cuda hands to
    MLX is executed as MLX would generate and launch it."""
    import mlx.core as mx

    def call(*, inputs: Sequence[Any], output_shapes: Sequence[Sequence[int]], output_dtypes: Sequence[Any],
             grid: Sequence[int], threadgroup: Sequence[int], template: Sequence[tuple[str, Any]] | None = None,
             init_value: float | None = None, verbose: bool = False, stream: Any = None) -> list[Any]:
        assert not template, "the CUDA engine passes its template arguments in the source"
        ins = []
        for n, x in zip(input_names, inputs, strict=True):
            a = _to_numpy(x)
            dtype, arr = (a[0], a[1]) if isinstance(a, tuple) else (_dtype_name(a), np.ascontiguousarray(a))
            ins.append((n, arr, dtype))
        names = [str(d).rsplit(".", 1)[-1] for d in output_dtypes]
        p = prepare_cuda(name, source, header, ins, list(zip(output_names, output_shapes, names, strict=True)), grid,
                         threadgroup, init_value)
        outs = run_many([p])[0]
        return [mx.array(o).view(mx.bfloat16) if d == "bfloat16" else mx.array(o) for o, d in zip(outs, names, strict=True)]

    return call
