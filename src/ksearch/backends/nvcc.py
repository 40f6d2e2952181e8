"""Compile-check `mx.fast.cuda_kernel` bodies with nvcc, wrapped the way MLX wraps them, on a machine without a GPU.

MLX (0.32, the version the package requires) generates, per kernel:
  default header (device utils: Shape/Strides = cuda::std::array of MAX_NDIM=10, WARP_SIZE, fp16/bf16 headers,
  cooperative_groups, `#define inf`), the user's `header`, then inside `namespace mlx::core::cu` a `__global__` function
  whose parameters are `const T* in` (+ `const __grid_constant__ Shape in_shape` / `Strides in_strides` / `int in_ndim`
  only when the body mentions them), then `T* out`, and at the top of the body `using T = <type>;` /
  `constexpr int N = <v>;` / `constexpr bool B = <true|false>;` for the template arguments.
MLX's header is not installed on machines without a GPU, so PRELUDE is an equivalent of our own, and `wrap` writes the
generated function. Two users: the knowledge linter's deep check (knowledge/cuda_check.py: every kernel of a
candidate in one translation unit, with `#line` markers so that each error points at a line of its own kernel body)
and the kernel tests (the library's kernels compile for sm_90a without register spills). NVRTC is stricter than nvcc
about host code, but kernel bodies are device code either way.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Callable, Sequence

CUDA_TYPES = {"float16": "__half", "bfloat16": "__nv_bfloat16", "float32": "float", "int32": "int32_t",
              "uint32": "uint32_t", "int64": "int64_t", "uint64": "uint64_t", "int8": "int8_t", "uint8": "uint8_t",
              "int16": "int16_t", "uint16": "uint16_t", "bool": "bool", "float64": "double"}

PRELUDE = r"""
#include <cuda_fp16.h>
#include <cuda_bf16.h>
#include <cuda/std/array>
#include <cuda/std/limits>
#include <cuda/std/tuple>
#include <cooperative_groups.h>
#define MAX_NDIM 10
#define WARP_SIZE 32
#define inf cuda::std::numeric_limits<float>::infinity()
namespace mlx::core::cu {
using Shape = cuda::std::array<int32_t, MAX_NDIM>;
using Strides = cuda::std::array<int64_t, MAX_NDIM>;
// Same contract as MLX's helper of this name: the storage offset of a row-major element index.
template <typename IdxT = int64_t>
inline __host__ __device__ IdxT elem_to_loc(IdxT elem, const int* shape, const int64_t* strides, int ndim) {
  IdxT loc = 0;
  for (int i = ndim - 1; i >= 0 && elem > 0; --i) { loc += (elem % shape[i]) * IdxT(strides[i]); elem /= shape[i]; }
  return loc;
}
template <typename T, int N>
struct alignas(sizeof(T) * N) AlignedVector {
  T val[N];
  __device__ T& operator[](int i) { return val[i]; }
  __device__ T operator[](int i) const { return val[i]; }
};
}  // namespace mlx::core::cu
"""

# A template argument: a dtype name ("float16"; None or "T" for the check's default dtype), an int or a bool.
TemplateValue = str | int | bool | None


def nvcc_path() -> str | None:
    return os.environ.get("KSEARCH_NVCC") or shutil.which("nvcc") or (
        "/usr/local/cuda/bin/nvcc" if os.path.exists("/usr/local/cuda/bin/nvcc") else None)


def ctype(dtype: str | None, default: str) -> str:
    """The C type of a dtype name; "T", "" and None stand for `default` (itself a dtype name)."""
    if dtype in ("T", "", None):
        dtype = default
    return CUDA_TYPES.get(dtype or "float32", "float")


def mentioned_metadata(name: str, source: str) -> list[str]:
    """What MLX passes for input `name` beside its pointer, in its order: each of shape, strides and ndim whose
    `<name>_<what>` occurs in the body's text (MLX tests substrings, not identifiers, and so does this)."""
    return [what for what in ("shape", "strides", "ndim") if f"{name}_{what}" in source]


def template_declarations(template: Sequence[tuple[str, TemplateValue]],
                          type_of: Callable[[str | None], str]) -> list[str]:
    """MLX's declarations of the template arguments at the top of a kernel body: a bool or an int becomes a
    constexpr, a dtype name a `using` of the C type `type_of` gives it."""
    decls = []
    for tname, value in template:
        if isinstance(value, bool):
            decls.append(f"constexpr bool {tname} = {'true' if value else 'false'};")
        elif isinstance(value, int):
            decls.append(f"constexpr int {tname} = {value};")
        else:
            decls.append(f"using {tname} = {type_of(value)};")
    return decls


_METADATA_PARAMS = {"shape": "Shape", "strides": "Strides", "ndim": "int"}
# A declaration of T in a kernel's header or body (`using T = ...;`, `typedef ... T;`): MLX adds none of its own.
_DECLARES_T = re.compile(r"\busing\s+T\b|\btypedef\b[^;]*\bT\s*;")


def wrap(name: str, source: str, header: str, inputs: Sequence[tuple[str, str | None]],
         outputs: Sequence[tuple[str, str | None]], template: Sequence[tuple[str, TemplateValue]] = (), *,
         dtype: str = "float32", scope: str | None = None, uses: str | None = None,
         body_file: str | None = None) -> str:
    """The function MLX generates for a kernel body: `header`, then `custom_kernel_<name>` in `mlx::core::cu`.

    inputs / outputs: (name, dtype name, or "T" for the kernel's T); template: (name, value) in order. The kernel's T
    is the dtype of its "T" template argument, else `dtype`; a body that uses T where neither it nor the header declares
    it gets T = `dtype`.
    For many kernels in one translation unit: `scope` puts the function in a namespace of its own, `uses` names the
    namespace its header lives in, and `body_file` starts the body with a `#line` marker, so that a diagnostic names
    the kernel and the line within its body."""
    declared = {t for t, _ in template}
    t_type = next((ctype(v, dtype) for t, v in template if t == "T" and isinstance(v, str | None)), ctype(dtype, dtype))
    params = []
    for n, dt in inputs:
        params.append(f"const {t_type if dt in ('T', '', None) else ctype(dt, dtype)}* {n}")
        params += [f"const __grid_constant__ {_METADATA_PARAMS[m]} {n}_{m}" for m in mentioned_metadata(n, source)]
    params += [f"{t_type if dt in ('T', '', None) else ctype(dt, dtype)}* {n}" for n, dt in outputs]
    decls = template_declarations(template, lambda value: ctype(value, dtype))
    if "T" not in declared and re.search(r"\bT\b", source) and not _DECLARES_T.search(header + "\n" + source):
        decls.append(f"using T = {t_type};")
    parts = [header, "namespace mlx::core::cu {"]
    if scope:
        parts.append(f"namespace {scope} {{")
    if uses:
        parts.append(f"using namespace ::{uses};")
    parts += ["namespace cg = cooperative_groups;", f"__global__ void custom_kernel_{name}(",
              ",\n".join(f"    {p}" for p in params) + ") {"]
    parts += [f"  {d}" for d in decls]
    if body_file:
        parts.append(f'#line 1 "{body_file}"')
    parts += [source, "}"]
    if scope:
        parts.append("}")
    parts.append("}  // namespace mlx::core::cu")
    return "\n".join(parts) + "\n"


def compile_check(units: Sequence[str], arch: str = "sm_90a", timeout: float = 300.0) -> tuple[bool, str]:
    """Compile PRELUDE and `units` (wrapped kernels, headers) as one translation unit to a cubin; (ok, nvcc's log,
    with ptxas's register and spill counts per kernel). Raises FileNotFoundError without nvcc and
    subprocess.TimeoutExpired past `timeout` seconds."""
    exe = nvcc_path()
    if exe is None:
        raise FileNotFoundError("nvcc not found (set KSEARCH_NVCC)")
    with tempfile.TemporaryDirectory(prefix="ksearch_nvcc_") as tmp:
        path = os.path.join(tmp, "candidate.cu")
        with open(path, "w") as fh:
            fh.write(PRELUDE + "\n".join(units))
        cmd = [exe, f"-gencode=arch={arch.replace('sm_', 'compute_')},code={arch}", "-std=c++17", "-cubin",
               "-Xptxas", "-v", "-o", os.path.join(tmp, "candidate.cubin"), path]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=tmp)
    return proc.returncode == 0, proc.stdout + proc.stderr
