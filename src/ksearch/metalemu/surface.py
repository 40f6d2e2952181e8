"""`mx.fast.metal_kernel` off the Mac: the same factory and kernel call as MLX 0.32, run by an emulation engine.

`metal_kernel(name, input_names, output_names, source, header="", ensure_row_contiguous=True, atomic_outputs=False,
compile_options=None)` returns a kernel object called as MLX's is (`inputs, output_shapes, output_dtypes, grid,
threadgroup, template, init_value, verbose, stream`, keyword only). Each call does what MLX does for one launch:

- arguments checked in MLX's order with MLX's exceptions and messages (TypeError where MLX's binding rejects a type,
  ValueError for its `[metal_kernel] ...` checks);
- inputs converted as MLX converts them (Python scalars become 0-d arrays: float32, int32 or int64, bool);
- the translation unit written as MLX writes it (surface_source.py; `verbose=True` prints it as MLX does);
- inputs that are not row-contiguous copied when `ensure_row_contiguous` (else passed as their strided memory,
  with their real strides in `<input>_strides`), outputs row-contiguous, filled with `init_value` or left
  uninitialised (filled with NaN / a byte pattern here, so that a kernel that relies on zeroed memory fails);
- the threadgroup size checked against the device's limit, then `dispatchThreads(grid, min(threadgroup, grid))`:
  `grid` counts threads, the last threadgroup of a dimension may be smaller.

The engine gets NumPy buffers in [[buffer(i)]] order (bfloat16 as its uint16 words) and writes the outputs in place.
`install()` puts this factory in place of `mx.fast.metal_kernel` in the current process.
"""

from __future__ import annotations

import functools
import math
import operator
from collections.abc import Callable, Sequence
from typing import Any

import mlx.core as mx
import numpy as np

from ksearch.backends.profiles import emulated_profile
from ksearch.errors import MetalEmuError
from ksearch.metalemu.surface_lines import Origin, locate, origin
from ksearch.metalemu.surface_source import TYPE_STRINGS, InputInfo, TemplateArg, generate


@functools.cache
def limits() -> tuple[int, int]:
    """(threads per threadgroup, bytes of threadgroup memory) of the emulated device: its hardware profile (every Apple
    GPU: 1024 and 32 KB)."""
    prof = emulated_profile("mlx-metal-emu")
    return int(prof["max_threads_per_group"]), int(prof["shared_memory_kb"]["default"] * 1024)


MATH_MODES = ("safe", "relaxed", "fast")

#: Dtypes MLX writes into a signature that the emulation does not run, and why: a compile error naming the buffer,
#: not clang's word on a type it has never heard of.
NOT_RUN = {
    "float64": "Metal has no 64-bit floating point (double): use float32",
    "complex64": "not emulated: complex64 buffers (MLX's complex64_t); judge this kernel on a Mac",
}

_CALL_SIGNATURE = ("__call__(self, *, inputs: list[scalar | array], output_shapes: list[Sequence[int]], "
                   "output_dtypes: list[Dtype], grid: tuple[int, int, int], threadgroup: tuple[int, int, int], "
                   "template: list[tuple[str, bool | int | Dtype]] | None = None, init_value: float | None = None, "
                   "verbose: bool = false, stream: StreamOrDevice = None)")
_FACTORY_SIGNATURE = ("metal_kernel(name: str, input_names: Sequence[str], output_names: Sequence[str], source: str, "
                      "header: str = '', ensure_row_contiguous: bool = True, atomic_outputs: bool = False, "
                      "compile_options: dict | None = None)")

Engine = Callable[..., None]


def _incompatible(func: str, signature: str, what: str) -> TypeError:
    """MLX's binding rejects a wrong type with this first line; the second says which argument it was."""
    return TypeError(f"{func}(): incompatible function arguments. {what}.\nThe supported signature:\n    {signature}")


def _dtype_name(dtype: Any) -> str:
    return str(dtype).rsplit(".", 1)[-1]


def _names(value: Any, what: str) -> list[str]:
    if isinstance(value, (str, bytes)) or not isinstance(value, Sequence) or \
            not all(isinstance(v, str) for v in value):
        raise _incompatible("metal_kernel", _FACTORY_SIGNATURE, f"`{what}` must be a sequence of str")
    return list(value)


def _math_mode(options: Any) -> str:
    if options is None:
        return "safe"
    if not isinstance(options, dict):
        raise ValueError("[metal_kernel] Expected `compile_options` to be a dict.")
    mode = "safe"
    for key, value in options.items():
        if key != "math_mode":
            raise ValueError(f"[metal_kernel] Unknown compile option `{key}`.")
        if value not in MATH_MODES:
            raise ValueError("[metal_kernel] Expected math_mode to be 'safe', 'relaxed', or 'fast'.")
        mode = str(value)
    return mode


def _int(value: Any, what: str, low: int = -(1 << 31), high: int = (1 << 31) - 1) -> int:
    """An int as the binding takes it (bool and anything with __index__, not float), within C++ int range."""
    try:
        out = operator.index(value)
    except TypeError:
        raise _incompatible("__call__", _CALL_SIGNATURE, f"`{what}` must be int, got {type(value).__name__}") \
            from None
    if not low <= out <= high:
        raise _incompatible("__call__", _CALL_SIGNATURE, f"`{what}` = {out} does not fit in a 32-bit int")
    return out


def _triple(value: Any, what: str) -> tuple[int, int, int]:
    if isinstance(value, (str, bytes)) or not isinstance(value, Sequence) or len(value) != 3:
        raise _incompatible("__call__", _CALL_SIGNATURE, f"`{what}` must be a tuple of three ints, got {value!r}")
    x, y, z = (_int(v, what) for v in value)
    if min(x, y, z) < 0:
        # MLX hands these to Metal as unsigned sizes; a negative one can only be a bug of the caller.
        raise ValueError(f"[metal_kernel] `{what}` {tuple(value)} has a negative dimension.")
    return x, y, z


def _to_array(value: Any) -> mx.array:
    """An input as MLX's binding converts it (`to_array`): arrays as they are, scalars and NumPy arrays converted."""
    if isinstance(value, mx.array):
        return value
    if isinstance(value, (bool, int, float, complex, np.ndarray, np.generic)):
        return mx.array(value)  # type: ignore[arg-type]
    raise ValueError(f"Invalid type {type(value).__name__} received in array initialization.")


def _template(value: Any) -> list[TemplateArg]:
    if value is None:
        return []
    if isinstance(value, (str, bytes, dict)) or not isinstance(value, Sequence):
        raise _incompatible("__call__", _CALL_SIGNATURE, "`template` must be a list of (name, value) pairs")
    out: list[TemplateArg] = []
    for item in value:
        if not (isinstance(item, Sequence) and not isinstance(item, (str, bytes)) and len(item) == 2
                and isinstance(item[0], str)):
            raise _incompatible("__call__", _CALL_SIGNATURE, f"template entry {item!r} is not a (str, value) pair")
        name, arg = item
        if isinstance(arg, bool):
            out.append(TemplateArg(name, "bool", int(arg)))
        elif isinstance(arg, int):
            if not -(1 << 31) <= arg < (1 << 31):
                raise ValueError(f"[metal_kernel] Template argument `{name}` = {arg} does not fit in a 32-bit int.")
            out.append(TemplateArg(name, "int", arg))
        elif isinstance(arg, mx.Dtype):
            out.append(TemplateArg(name, "dtype", _dtype_name(arg)))
        else:
            raise ValueError("[metal_kernel] Invalid template argument. Must be `mlx.core.Dtype`, `int` or `bool`.")
    return out


def _check_stream(stream: Any) -> None:
    """MLX runs custom Metal kernels on a GPU stream only: None or a GPU device / stream; the emulation runs there."""
    if stream is None:
        return
    device = getattr(stream, "device", stream)  # a Stream has .device; a Device or DeviceType is itself
    kind = getattr(device, "type", device)
    if kind != mx.gpu:
        raise ValueError("[metal_kernel] Only supports the GPU.")


def _host(x: mx.array) -> np.ndarray:
    """The array's memory as NumPy (no copy where it can be avoided), bfloat16 as its uint16 words."""
    if x.dtype == mx.bfloat16:
        x = x.view(mx.uint16)
    return np.asarray(x)


def _strided_buffer(view: np.ndarray) -> tuple[np.ndarray, list[int]]:
    """The memory a strided array occupies, as a flat buffer starting at its first element, and its element strides:
    what a Metal kernel receives for an input MLX does not copy."""
    item = view.itemsize
    strides = [s // item for s in view.strides]
    if any(s < 0 for s in strides):
        raise ValueError("[metal_kernel] an input with negative strides (a reversed view) passed with "
                         "ensure_row_contiguous=False is not emulated; pass mx.contiguous(x) or keep the default.")
    span = 1 + sum((n - 1) * s for n, s in zip(view.shape, strides, strict=True)) if view.size else 0
    flat = np.lib.stride_tricks.as_strided(view, shape=(span,), strides=(item,))
    return flat, strides


def _row_major_strides(shape: Sequence[int]) -> list[int]:
    out, acc = [], 1
    for n in reversed(shape):
        out.append(acc)
        acc *= n
    return out[::-1]


def _uninitialised(shape: tuple[int, ...], dtype: mx.Dtype) -> np.ndarray:
    """Fresh device memory as the kernel finds it without init_value: NaN for floating types, a byte pattern for
    the others (MLX leaves outputs uninitialised; a kernel that relies on zeros must not pass by luck)."""
    name = _dtype_name(dtype)
    if name == "bfloat16":
        return np.full(shape, 0x7FC0, dtype=np.uint16)
    if name in ("float16", "float32", "float64", "complex64"):
        return np.full(shape, np.nan, dtype=np.dtype(name))
    if name == "bool":
        return np.ones(shape, dtype=np.bool_)
    np_dtype = np.dtype(name)
    return np.full(math.prod(shape) * np_dtype.itemsize, 0xA5, dtype=np.uint8).view(np_dtype).reshape(shape)


def _filled(shape: tuple[int, ...], dtype: mx.Dtype, init_value: float) -> np.ndarray:
    # MLX takes init_value as a float and casts it to the output's dtype (`array(init_value, dtype)`).
    value = mx.array(float(init_value), dtype=mx.float32).astype(dtype)
    return np.array(np.broadcast_to(_host(value), shape))


def cpu_engine() -> Engine:
    """The C++ engine with real threadgroup semantics and checks (ksearch.metalemu.run_kernel)."""
    import ksearch.metalemu as engine

    return engine.run_kernel  # type: ignore[no-any-return,attr-defined]


ENGINES: dict[str, Callable[[], Engine]] = {"cpu": cpu_engine}


class MetalKernel:
    """What `metal_kernel` returns: call it with MLX's keywords; it returns the list of output arrays."""

    def __init__(self, name: str, input_names: list[str], output_names: list[str], source: str, header: str,
                 ensure_row_contiguous: bool, atomic_outputs: bool, math_mode: str, engine: str,
                 where: Origin | None = None) -> None:
        self.name = name
        self.input_names = input_names
        self.output_names = output_names
        self.source = source
        self.header = header
        self.ensure_row_contiguous = ensure_row_contiguous
        self.atomic_outputs = atomic_outputs
        self.math_mode = math_mode
        self.engine = engine
        self.where = where or Origin()
        self._sources: dict[tuple[Any, ...], tuple[str, str]] = {}

    def __repr__(self) -> str:
        return f"<emulated metal_kernel {self.name!r} ({self.engine} engine)>"

    def __call__(self, *, inputs: Sequence[Any], output_shapes: Sequence[Sequence[int]], output_dtypes: Sequence[Any],
                 grid: Sequence[int], threadgroup: Sequence[int], template: Sequence[tuple[str, Any]] | None = None,
                 init_value: float | None = None, verbose: bool = False, stream: Any = None) -> list[mx.array]:
        # Types first, as MLX's binding checks them before anything runs.
        for what, value in (("inputs", inputs), ("output_shapes", output_shapes), ("output_dtypes", output_dtypes)):
            if isinstance(value, (str, bytes)) or not isinstance(value, Sequence):
                raise _incompatible("__call__", _CALL_SIGNATURE, f"`{what}` must be a list")
        shapes = []
        for shape in output_shapes:
            if isinstance(shape, (str, bytes)) or not isinstance(shape, Sequence):
                raise _incompatible("__call__", _CALL_SIGNATURE, f"output shape {shape!r} is not a sequence of ints")
            shapes.append(tuple(_int(n, "output_shapes") for n in shape))
        if not all(isinstance(d, mx.Dtype) for d in output_dtypes):
            raise _incompatible("__call__", _CALL_SIGNATURE, "`output_dtypes` must hold mlx.core.Dtype values")
        grid3, group3 = _triple(grid, "grid"), _triple(threadgroup, "threadgroup")
        if init_value is not None and (isinstance(init_value, (str, bytes)) or
                                       not isinstance(init_value, (int, float, np.number))):
            raise _incompatible("__call__", _CALL_SIGNATURE, "`init_value` must be a float or None")
        if not isinstance(verbose, bool):
            raise _incompatible("__call__", _CALL_SIGNATURE, "`verbose` must be a bool")
        # Then what PyCustomKernelFunction and the kernel function check, in their order.
        arrays = [_to_array(v) for v in inputs]
        targs = _template(template)
        for what, got, want in (("inputs", len(arrays), len(self.input_names)),
                                ("output_shapes", len(shapes), len(self.output_names)),
                                ("output_dtypes", len(output_dtypes), len(self.output_names))):
            if got != want:
                raise ValueError(f"[metal_kernel] Expected `{what}` to have size {want} but got size {got}.\n")
        _check_stream(stream)
        if any(n < 0 for s in shapes for n in s):
            raise ValueError(f"[metal_kernel] output shapes {shapes} have a negative dimension.")
        out_types = [_dtype_name(d) for d in output_dtypes]
        for t in [*(_dtype_name(a.dtype) for a in arrays), *out_types]:
            if t not in TYPE_STRINGS:
                raise ValueError(f"Unsupported compilation type {t}")
        infos = [InputInfo(_dtype_name(a.dtype), a.ndim, a.size) for a in arrays]
        self._check_types([i.dtype for i in infos], out_types)
        func, text = self.translation_unit(infos, out_types, targs)
        if verbose:
            print(f"Generated source code for `{self.name}`:\n```\n{text}\n```", flush=True)
        # eval_gpu: outputs, input copies, the threadgroup check, the launch.
        outs = [_filled(s, d, init_value) if init_value is not None else _uninitialised(s, d)
                for s, d in zip(shapes, output_dtypes, strict=True)]
        buffers = self._input_buffers(arrays) + outs
        max_threads, memory = limits()
        tg_size = group3[0] * group3[1] * group3[2]
        if tg_size > max_threads:
            raise ValueError(f"Thread group size ({tg_size}) is greater than  the maximum allowed threads per "
                             f"threadgroup ({max_threads}).")
        dims = tuple(min(t, g) for t, g in zip(group3, grid3, strict=True))
        if min(grid3) > 0:
            if min(dims) == 0:
                raise ValueError(f"[metal_kernel] threadgroup {group3} has a zero dimension: Metal cannot launch it.")
            try:
                ENGINES[self.engine]()(text, func, buffers, grid3, dims, threadgroup_memory_limit=memory)
            except MetalEmuError as exc:
                raise locate(exc, self.name, text, self.source, self.header, self.where) from None
        return [self._result(o, d) for o, d in zip(outs, output_dtypes, strict=True)]

    def translation_unit(self, inputs: list[InputInfo], output_dtypes: list[str],
                         template: list[TemplateArg]) -> tuple[str, str]:
        """(host name, source) for these argument types, written once per distinct combination."""
        key = (tuple(inputs), tuple(output_dtypes), tuple(template))
        if key not in self._sources:
            self._sources[key] = generate(self.name, self.input_names, self.output_names, self.source, self.header,
                                          inputs, output_dtypes, template, self.atomic_outputs)
        return self._sources[key]

    def _input_buffers(self, arrays: list[mx.array]) -> list[np.ndarray]:
        """Each input's buffer, then its shape / strides / ndim where the signature has them ([[buffer(i)]] order)."""
        out: list[np.ndarray] = []
        for name, a in zip(self.input_names, arrays, strict=True):
            view = _host(a)
            if self.ensure_row_contiguous or view.flags.c_contiguous:
                data = np.ascontiguousarray(view)
                strides = [s // data.itemsize for s in data.strides] if view.flags.c_contiguous else \
                    _row_major_strides(a.shape)
                data = data.reshape(()) if a.ndim == 0 else data.reshape(-1)
            else:
                data, strides = _strided_buffer(view)
            out.append(data)
            if a.ndim > 0:
                # The same substring tests as the signature (surface_source.shape_infos).
                if f"{name}_shape" in self.source:
                    out.append(np.array(a.shape, dtype=np.int32))
                if f"{name}_strides" in self.source:
                    out.append(np.array(strides, dtype=np.int64))
                if f"{name}_ndim" in self.source:
                    out.append(np.array(a.ndim, dtype=np.int32))
        return out

    def _check_types(self, inputs: list[str], outputs: list[str]) -> None:
        for what, names, types in (("input", self.input_names, inputs), ("output", self.output_names, outputs)):
            for name, dtype in zip(names, types, strict=True):
                if dtype in NOT_RUN:
                    raise MetalEmuError(f"metal_kernel {self.name!r}: {what} `{name}` is {dtype}: {NOT_RUN[dtype]}",
                                        status="compile_error", kind="compile")

    @staticmethod
    def _result(buf: np.ndarray, dtype: mx.Dtype) -> mx.array:
        arr = mx.array(buf)
        return arr.view(mx.bfloat16) if dtype == mx.bfloat16 else arr


def metal_kernel(name: str, input_names: Sequence[str], output_names: Sequence[str], source: str, header: str = "",
                 ensure_row_contiguous: bool = True, atomic_outputs: bool = False,
                 compile_options: dict[str, str] | None = None, *, engine: str = "cpu") -> MetalKernel:
    """mx.fast.metal_kernel with MLX's arguments and checks; `engine` picks the emulation that runs it."""
    for what, value in (("name", name), ("source", source), ("header", header)):
        if not isinstance(value, str):
            raise _incompatible("metal_kernel", _FACTORY_SIGNATURE, f"`{what}` must be a str")
    ins, outs = _names(input_names, "input_names"), _names(output_names, "output_names")
    for flag, on in (("ensure_row_contiguous", ensure_row_contiguous), ("atomic_outputs", atomic_outputs)):
        if not isinstance(on, bool):
            raise _incompatible("metal_kernel", _FACTORY_SIGNATURE, f"`{flag}` must be a bool")
    mode = _math_mode(compile_options)
    if not outs:
        raise ValueError("[metal_kernel] Must specify at least one output.")
    if engine not in ENGINES:
        raise ValueError(f"unknown Metal emulation engine {engine!r}; choose one of {', '.join(ENGINES)}")
    return MetalKernel(name, ins, outs, source, header, ensure_row_contiguous, atomic_outputs, mode, engine,
                       origin(source, header))


def install(engine: str = "cpu") -> Callable[[], None]:
    """Put the emulated factory in place of `mx.fast.metal_kernel` in this process, for every module that looks it up
    from now on (call it before a candidate or a kernel module is imported: a module that bound the original with
    `from mlx.core.fast import metal_kernel` keeps it). Returns the function that puts MLX's own back.

    The factory carries `metal_emulation` (the engine's name): the library's dispatch reads it to take its Metal
    kernels on this emulated device (ksearch.kernels.device.metal_emulated)."""
    if engine not in (*ENGINES, "cuda"):
        raise ValueError(f"unknown Metal emulation engine {engine!r}; choose one of {', '.join(ENGINES)}, cuda")
    original = mx.fast.metal_kernel

    def factory(name: str, input_names: Sequence[str], output_names: Sequence[str], source: str, header: str = "",
                ensure_row_contiguous: bool = True, atomic_outputs: bool = False,
                compile_options: dict[str, str] | None = None) -> Any:
        if engine == "cuda":
            # The CUDA engine takes MLX arrays itself: the body translated to CUDA, run by mx.fast.cuda_kernel.
            from ksearch.metalemu.cuda_kernel import metal_kernel_via_cuda

            return metal_kernel_via_cuda(name, input_names, output_names, source, header, ensure_row_contiguous,
                                         atomic_outputs, compile_options)
        return metal_kernel(name, input_names, output_names, source, header, ensure_row_contiguous, atomic_outputs,
                            compile_options, engine=engine)

    factory.metal_emulation = engine  # type: ignore[attr-defined]
    factory.__doc__ = metal_kernel.__doc__
    mx.fast.metal_kernel = factory  # type: ignore[assignment]

    def restore() -> None:
        mx.fast.metal_kernel = original

    return restore
