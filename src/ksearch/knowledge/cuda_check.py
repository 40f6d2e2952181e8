"""Compile-checking MLX-CUDA kernel bodies with nvcc, wrapped the way `mx.fast.cuda_kernel` wraps them.

MLX (0.29+, checked against 0.32) generates, per kernel:
  default header (device utils: Shape/Strides = cuda::std::array of MAX_NDIM=10, WARP_SIZE, fp16/bf16 headers,
  cooperative_groups, `#define inf`), the user's `header`, then inside `namespace mlx::core::cu` a `__global__` function
  whose parameters are `const T* in` (+ `const __grid_constant__ Shape in_shape` / `Strides in_strides` / `int in_ndim`
  only when the body mentions them), then `T* out`, and at the top of the body `using T = <type>;` /
  `constexpr int N = <v>;` / `constexpr bool B = <true|false>;` for the template arguments.
We write an equivalent prelude of our own (MLX's header is not installed on CPU machines) and compile all kernels of a
candidate in one translation unit, with `#line` markers so that each error points at a line of its own kernel body.
NVRTC is stricter than nvcc about host code, but kernel bodies are device code either way.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass

from ksearch.knowledge.extract import KernelUse
from ksearch.knowledge.units import translation_unit

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


@dataclass
class CompileMessage:
    kernel: str  # kernel name, or "" for the prelude/wrapper
    line: int | None  # line within the kernel body
    severity: str  # "error" | "warning"
    text: str
    index: int | None = None  # position of the kernel in the list that was compiled


def nvcc_path() -> str | None:
    return os.environ.get("KSEARCH_NVCC") or shutil.which("nvcc") or (
        "/usr/local/cuda/bin/nvcc" if os.path.exists("/usr/local/cuda/bin/nvcc") else None)


def _ctype(dtype: str, default: str) -> str:
    if dtype in ("T", "", None):
        dtype = default
    return CUDA_TYPES.get(dtype, "float")


def _template_lines(k: KernelUse, dtype: str) -> list[str]:
    lines = []
    for t in k.template:
        if t.kind == "dtype":
            lines.append(f"  using {t.name} = {_ctype(t.value, dtype)};")
        elif t.kind == "bool":
            lines.append(f"  constexpr bool {t.name} = {'true' if t.value else 'false'};")
        else:
            # An int we could not resolve gets a representative power of two (a head dim, a tile size).
            value = t.value if t.value is not None else (64 if "DIM" in t.name.upper() else 32)
            lines.append(f"  constexpr int {t.name} = {value};")
    # Names the body uses as template parameters but the call site did not reveal: give them defaults, so the
    # check still runs (an unknown `T` is by far the most common).
    body = k.source or ""
    declared = {t.name for t in k.template}
    if "T" not in declared and re.search(r"\bT\b", body) and not re.search(r"\b(using|typedef)\s+T\b", body):
        lines.append(f"  using T = {_ctype(dtype, dtype)};")
    return lines


def wrap_kernel(k: KernelUse, index: int, header_ns: str, dtype: str = "float16") -> str:
    """The kernel function as MLX would generate it, in its own namespace, with #line markers into the body."""
    body = k.source or ""
    params = []
    for name in k.input_names:
        params.append(f"    const {_ctype(k.input_dtypes.get(name, 'T'), dtype)}* {name}")
        if f"{name}_shape" in body:
            params.append(f"    const __grid_constant__ Shape {name}_shape")
        if f"{name}_strides" in body:
            params.append(f"    const __grid_constant__ Strides {name}_strides")
        if f"{name}_ndim" in body:
            params.append(f"    const __grid_constant__ int {name}_ndim")
    for i, name in enumerate(k.output_names):
        od = k.output_dtypes[i] if i < len(k.output_dtypes) else "T"
        params.append(f"    {_ctype(od, dtype)}* {name}")
    parts = ["namespace mlx::core::cu {", f"namespace ks_unit{index} {{", f"using namespace ::{header_ns};",
             "namespace cg = cooperative_groups;",
             f"__global__ void custom_kernel_{k.name}_{index}(", ",\n".join(params) + ") {"]
    parts += _template_lines(k, dtype)
    parts += [f'#line 1 "kernel{index}_{k.name}.body"', body, "}", "}", "}  // namespace mlx::core::cu"]
    return "\n".join(parts)


_DIAG = re.compile(r'^"?(?P<file>[^"(]+)"?\((?P<line>\d+)\): (?P<sev>error|warning)[^:]*: (?P<msg>.*)$')
_PTXAS = re.compile(r"ptxas (?P<sev>error|fatal|warning)\s*:\s*(?P<msg>.*)")


def compile_kernels(kernels: list[KernelUse], dtype: str = "float16", arch: str = "sm_90a",
                    timeout: float = 300.0, chunk: int = 40, jobs: int = 1) -> list[CompileMessage] | None:
    """Compile every resolved kernel; None when nvcc is missing. Kernels go `chunk` to a translation unit (nvcc's
    start-up dominates small units, huge ones compile slowly), `jobs` units at a time. Each message carries the
    kernel's index in `kernels`, so callers that compile many templates at once can tell them apart."""
    nvcc = nvcc_path()
    if nvcc is None:
        return None
    units = [(i, k) for i, k in enumerate(kernels) if k.source is not None]
    groups = [units[g:g + max(1, chunk)] for g in range(0, len(units), max(1, chunk))]
    if jobs > 1 and len(groups) > 1:
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(max_workers=jobs) as pool:
            results = list(pool.map(lambda g: _compile_unit(nvcc, g, dtype, arch, timeout), groups))
    else:
        results = [_compile_unit(nvcc, g, dtype, arch, timeout) for g in groups]
    return [m for r in results for m in r]


def _compile_unit(nvcc: str, units: list[tuple[int, KernelUse]], dtype: str, arch: str,
                  timeout: float) -> list[CompileMessage]:
    text = PRELUDE + translation_unit(units, lambda k, i, ns: wrap_kernel(k, i, ns, dtype))
    names = {f"kernel{i}_{k.name}": (i, k.name) for i, k in units}
    with tempfile.TemporaryDirectory(prefix="ksearch_nvcc_") as tmp:
        path = os.path.join(tmp, "candidate.cu")
        with open(path, "w") as fh:
            fh.write(text)
        cmd = [nvcc, f"-arch={arch}", "-std=c++17", "-cubin", "-o", os.path.join(tmp, "out.cubin"), path]
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=tmp)
        except subprocess.TimeoutExpired:
            return [CompileMessage("", None, "error", f"nvcc took more than {timeout:.0f} s (kernels "
                                   f"{units[0][0]}..{units[-1][0]}); not checked")]
    out: list[CompileMessage] = []
    for raw in (proc.stdout + proc.stderr).splitlines():
        m = _DIAG.match(raw.strip())
        if m:
            stem, _, part = os.path.basename(m["file"]).rpartition(".")
            index, kernel = names.get(stem, (None, ""))
            line = int(m["line"]) if kernel and part == "body" else None
            where = "" if part == "body" else f" (in {part or 'prelude'})"
            out.append(CompileMessage(kernel, line, m["sev"], m["msg"].strip() + where, index))
            continue
        p = _PTXAS.search(raw)
        if p:
            out.append(CompileMessage("", None, "error" if p["sev"] != "warning" else "warning", "ptxas: " + p["msg"]))
    if proc.returncode != 0 and not any(m.severity == "error" for m in out):
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-3:]
        out.append(CompileMessage("", None, "error", "nvcc failed: " + " | ".join(tail)))
    return out
