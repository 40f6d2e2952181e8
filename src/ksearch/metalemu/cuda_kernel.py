"""The CUDA engine of the Metal emulation: `mx.fast.metal_kernel` kernels run through `mx.fast.cuda_kernel`.

`metal_kernel_via_cuda(...)` takes what `mx.fast.metal_kernel` takes and returns a callable with the same keywords.
The body and header are translated once (cuda_translate); each call's input dtypes, ranks and template arguments
give the prologue that declares what MLX's generated Metal signature declares: the inputs with their Metal types
(`x`, `x_shape`, `x_strides`, `x_ndim`), the outputs (`device atomic<T>*` with atomic_outputs), the template
arguments, and every Metal attribute the body names, computed from the dispatch (cuda_msl_simd.cuh).

Dispatch: Metal's grid counts threads and its last threadgroup along a dimension may be smaller. The CUDA launch has
one 1-D block of tx*ty*tz threads per Metal threadgroup; the real grid and threadgroup travel in a small int32 input
(`ks_launch`), from which each thread derives its Metal coordinates, and threads outside a smaller last threadgroup
leave before the body (so barriers and SIMD-group functions see exactly Metal's threads).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ksearch.backends.nvcc import mentioned_metadata, template_declarations
from ksearch.errors import MetalEmuError
from ksearch.kernels.kernel_text import content_name
from ksearch.metalemu.cuda_lex import compile_error, compile_error_part
from ksearch.metalemu.cuda_rules import load_rules
from ksearch.metalemu.cuda_translate import Translation, translate
from ksearch.metalemu.surface_lines import Origin, locate_part, origin, part_place

LIBRARY_PARTS = ("cuda_msl_scalar.cuh", "cuda_msl_vector.cuh", "cuda_msl_math.cuh", "cuda_msl_simd.cuh",
                 "cuda_msl_matrix.cuh")
METAL_TYPES = {"float32": "float", "float16": "::metal::half", "bfloat16": "::metal::bfloat", "int32": "int32_t",
               "uint32": "uint32_t", "int64": "int64_t", "uint64": "uint64_t", "int16": "int16_t", "uint16": "uint16_t",
               "int8": "int8_t", "uint8": "uint8_t", "bool": "bool"}
MAX_THREADS_PER_THREADGROUP = 1024  # Apple GPUs (and what MLX checks a Metal dispatch against)
LAUNCH = "ks_launch"  # the int32 input carrying [grid.xyz, threadgroup.xyz]
TemplateValue = str | int | bool
# An input's metadata as the Metal body sees it, from the CUDA kernel's parameters of the same names with ks_in_.
_METADATA_LOCALS = {"shape": "  const int* {n}_shape = ks_in_{n}_shape.data();",
                    "strides": "  const int64_t* {n}_strides = ks_in_{n}_strides.data();",
                    "ndim": "  const int {n}_ndim = ks_in_{n}_ndim;"}


@functools.cache
def library() -> str:
    """The MSL library in CUDA C++ that every translated kernel is compiled with."""
    here = Path(__file__).resolve().parent
    parts = "\n".join((here / part).read_text() for part in LIBRARY_PARTS)
    return f"#ifndef KSEARCH_MSL_CUDA\n#define KSEARCH_MSL_CUDA\n{parts}\n#endif  // KSEARCH_MSL_CUDA\n"


def metal_type(dtype: str, kernel: str = "") -> str:
    if dtype not in METAL_TYPES:
        raise compile_error(f"arrays of {dtype} are not supported by the emulation (supported: "
                            f"{', '.join(METAL_TYPES)})", kernel, "signature", None, "dtype")
    return METAL_TYPES[dtype]


@dataclass(frozen=True)
class Arg:
    """An input as the generated signature sees it: its name, dtype name and rank."""

    name: str
    dtype: str
    ndim: int


@dataclass(frozen=True)
class CudaSource:
    """What mx.fast.cuda_kernel is built from (input names end with the launch input)."""

    name: str
    input_names: list[str]
    output_names: list[str]
    source: str
    header: str
    where: Origin = Origin()  # where the Metal kernel's source= and header= start in the file that created it

    def place(self, file: str, line: int) -> str | None:
        """A compiler's `file(line)` as the user counts it: the `#line` markers name the Metal body `<name>.metal` and
        the header `<name>.header.metal`; None for a line of the generated text around them."""
        part = {f"{self.name}.metal": "source=", f"{self.name}.header.metal": "header="}.get(file)
        return part_place(part, line, self.where).long if part else None


@dataclass(frozen=True)
class Launch:
    grid: tuple[int, int, int]  # Metal's grid, in threads
    threadgroup: tuple[int, int, int]  # Metal's threadgroup, clamped to the grid as MLX does
    cuda_grid: tuple[int, int, int]  # for mx.fast.cuda_kernel (threads)
    cuda_threadgroup: tuple[int, int, int]
    blocks: int  # threadgroups in the dispatch


def plan_launch(grid: Sequence[int], threadgroup: Sequence[int]) -> Launch:
    """The CUDA launch for a Metal dispatch (grid in threads, MLX's clamping and size check)."""
    if len(grid) != 3 or len(threadgroup) != 3:
        raise ValueError("[metal_kernel] grid and threadgroup must be 3-tuples of ints")
    g = tuple(int(v) for v in grid)
    t = tuple(int(v) for v in threadgroup)
    if min(g) < 0 or min(t) < 1:
        raise ValueError(f"[metal_kernel] invalid grid {g} or threadgroup {t}: sizes must be positive")
    if math.prod(t) > MAX_THREADS_PER_THREADGROUP:
        raise ValueError(f"Thread group size ({math.prod(t)}) is greater than  the maximum allowed threads per "
                         f"threadgroup ({MAX_THREADS_PER_THREADGROUP}).")
    tg = (min(t[0], max(g[0], 1)), min(t[1], max(g[1], 1)), min(t[2], max(g[2], 1)))
    blocks = math.prod(-(-g[i] // tg[i]) for i in range(3))
    threads = math.prod(tg)
    bx = max(1, min(blocks, (2**31 - 1) // threads))
    by = -(-blocks // bx) if blocks else 0
    if by > 65535:
        raise ValueError(f"[metal_kernel] a grid of {blocks} threadgroups is more than the emulation can launch")
    return Launch(g, tg, (threads * bx, max(by, 1), 1), (threads, 1, 1), blocks)  # type: ignore[arg-type]


class MetalKernelTranslation:
    """A Metal kernel (body + header) translated once; `cuda_source` writes the CUDA kernel for one signature."""

    def __init__(self, name: str, input_names: Sequence[str], output_names: Sequence[str], source: str,
                 header: str = "", atomic_outputs: bool = False, where: Origin | None = None) -> None:
        if not output_names:
            raise ValueError("[metal_kernel] Must specify at least one output.")
        self.name, self.input_names, self.output_names = name, list(input_names), list(output_names)
        self.metal_source, self.atomic_outputs = source, atomic_outputs
        self.where = where or origin(source, header)
        try:
            self.header: Translation | None = (translate(header, kernel=name, where="header") if header.strip()
                                               else None)
            self.body: Translation = translate(source, kernel=name, where="body", context=self.header)
        except MetalEmuError as exc:
            raise self.located(exc) from None

    def located(self, exc: MetalEmuError) -> MetalEmuError:
        """A translation's error led by the kernel's name and its line as the user counts it (surface_lines)."""
        part, what = compile_error_part(exc)
        return locate_part(exc, self.name, what, part, self.where)

    def cuda_source(self, inputs: Sequence[Arg], output_dtypes: Sequence[str],
                    template: Sequence[tuple[str, TemplateValue]] = ()) -> CudaSource:
        try:
            return self._cuda_source(inputs, output_dtypes, template)
        except MetalEmuError as exc:
            raise self.located(exc) from None

    def _cuda_source(self, inputs: Sequence[Arg], output_dtypes: Sequence[str],
                     template: Sequence[tuple[str, TemplateValue]]) -> CudaSource:
        lines = [f"  const ::metal::detail::launch ks_launch_ = ::metal::detail::make_launch({LAUNCH});",
                 "  if (!::metal::detail::enter(ks_launch_)) return;"]
        macros = self.header.macros if self.header else set()
        for top in self.header.top_names if self.header else []:
            if top not in macros:
                lines.append(f"  using ::{top};")
        lines += [f"  {d}" for d in template_declarations(template, lambda value: metal_type(str(value), self.name))]
        src = self.metal_source
        for arg in inputs:
            mt = metal_type(arg.dtype, self.name)
            if arg.ndim == 0:
                lines.append(f"  const {mt}& {arg.name} = *reinterpret_cast<const {mt}*>(ks_in_{arg.name});")
                continue
            lines.append(f"  const {mt}* {arg.name} = reinterpret_cast<const {mt}*>(ks_in_{arg.name});")
            # MLX's metadata for the input, as pointers and a count the way Metal's kernel sees them.
            lines += [_METADATA_LOCALS[m].format(n=arg.name) for m in mentioned_metadata(arg.name, src)]
        for name, dtype in zip(self.output_names, output_dtypes, strict=True):
            mt = metal_type(dtype, self.name)
            pt = f"::metal::atomic<{mt}>" if self.atomic_outputs else mt
            lines.append(f"  {pt}* {name} = reinterpret_cast<{pt}*>(ks_out_{name});")
        for rule in load_rules().attributes():
            if rule.name in src:
                lines.append(f"  ::metal::{rule.type} {rule.name} = ks_launch_.{rule.name};")
        lines.append(f'#line 1 "{self.name}.metal"')
        header = library()
        if self.header is not None:
            header += f'\n#line 1 "{self.name}.header.metal"\n{self.header.text}\n'
        return CudaSource(name=self.name, input_names=[f"ks_in_{a.name}" for a in inputs] + [LAUNCH],
                          output_names=[f"ks_out_{n}" for n in self.output_names],
                          source="\n".join(lines) + "\n" + self.body.text, header=header, where=self.where)


def _dtype_name(dtype: Any) -> str:
    return str(dtype).rsplit(".", 1)[-1]


class MetalKernelViaCuda:
    """The object `metal_kernel_via_cuda` returns: call it as an `mx.fast.metal_kernel` kernel."""

    def __init__(self, translation: MetalKernelTranslation, ensure_row_contiguous: bool) -> None:
        self.translation = translation
        self.ensure_row_contiguous = ensure_row_contiguous
        self._kernels: dict[tuple[Any, ...], tuple[CudaSource, Any]] = {}

    def __call__(self, *, inputs: Sequence[Any], output_shapes: Sequence[Sequence[int]], output_dtypes: Sequence[Any],
                 grid: Sequence[int], threadgroup: Sequence[int], template: Sequence[tuple[str, Any]] | None = None,
                 init_value: float | None = None, verbose: bool = False, stream: Any = None) -> list[Any]:
        import mlx.core as mx

        tr = self.translation
        for what, got, want in (("inputs", len(inputs), len(tr.input_names)),
                                ("output_shapes", len(output_shapes), len(tr.output_names)),
                                ("output_dtypes", len(output_dtypes), len(tr.output_names))):
            if got != want:
                raise ValueError(f"[metal_kernel] Expected `{what}` to have size {want} but got size {got}.")
        arrays = [x if isinstance(x, mx.array) else mx.array(x) for x in inputs]
        tmpl = [(n, v if isinstance(v, bool | int) else _dtype_name(v)) for n, v in (template or [])]
        launch = plan_launch(grid, threadgroup)
        out_dtypes = [_dtype_name(d) for d in output_dtypes]
        if launch.blocks == 0:  # nothing dispatched: outputs keep their initial contents
            return [mx.full(tuple(s), init_value or 0, dtype=d) for s, d in zip(output_shapes, output_dtypes, strict=True)]
        args = [Arg(n, _dtype_name(a.dtype), a.ndim) for n, a in zip(tr.input_names, arrays, strict=True)]
        key = (tuple(args), tuple(out_dtypes), tuple(tmpl))
        if key not in self._kernels:
            src = tr.cuda_source(args, out_dtypes, tmpl)
            # One Metal kernel is one CUDA text per dtype combination, and MLX before 0.32.1 kept a process's CUDA
            # kernels by name alone: the name carries a digest of the text, or a second combination ran the first's.
            name = content_name(src.name, src.header, src.source, src.input_names, src.output_names)
            kernel = mx.fast.cuda_kernel(name=name, input_names=src.input_names, output_names=src.output_names,
                                         source=src.source, header=src.header,
                                         ensure_row_contiguous=self.ensure_row_contiguous)
            self._kernels[key] = (src, kernel)
        _, kernel = self._kernels[key]
        meta = mx.array([*launch.grid, *launch.threadgroup], dtype=mx.int32)
        kwargs: dict[str, Any] = {"stream": stream} if stream is not None else {}
        return list(kernel(inputs=[*arrays, meta], output_shapes=[tuple(s) for s in output_shapes],
                           output_dtypes=list(output_dtypes), grid=launch.cuda_grid,
                           threadgroup=launch.cuda_threadgroup, init_value=init_value, verbose=verbose, **kwargs))


def metal_kernel_via_cuda(name: str, input_names: Sequence[str], output_names: Sequence[str], source: str,
                          header: str = "", ensure_row_contiguous: bool = True, atomic_outputs: bool = False,
                          compile_options: dict[str, str] | None = None) -> MetalKernelViaCuda:
    """`mx.fast.metal_kernel` with the same arguments, run on an NVIDIA GPU through `mx.fast.cuda_kernel`.

    compile_options (MLX 0.32's math_mode) is accepted and has no effect: metal:: and metal::precise:: functions are
    CUDA's accurate ones in every mode, metal::fast:: ones its intrinsics.

    An MSL construct the emulation does not support raises MetalEmuError (status compile_error) here, naming the
    construct and the line."""
    if compile_options is not None and not isinstance(compile_options, dict):
        raise TypeError("metal_kernel: compile_options must be a dict such as {'math_mode': 'safe'}")
    translation = MetalKernelTranslation(name, input_names, output_names, source, header, atomic_outputs)
    return MetalKernelViaCuda(translation, ensure_row_contiguous)
