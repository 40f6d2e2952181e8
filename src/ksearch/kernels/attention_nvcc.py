"""Compile-check a `mx.fast.cuda_kernel` body with nvcc on a machine without a GPU (tests, offline development).

The body is wrapped the way MLX 0.32 wraps it (see the project's reference notes on custom kernels): a prelude with
the fp16/bf16 headers and MLX's `Shape` type, the user's header, then a `__global__` function whose parameters are the
inputs (`const T*`, plus `x_shape` when the body mentions it) and outputs, with the template arguments declared at the
top of the body. Only what our own kernels need is modelled.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import Sequence

PRELUDE = r"""
#include <cuda_fp16.h>
#include <cuda_bf16.h>
#include <cuda/std/array>
#include <cooperative_groups.h>
#define WARP_SIZE 32
namespace mlx::core::cu {
using Shape = cuda::std::array<int32_t, 10>;
using Strides = cuda::std::array<int64_t, 10>;
}
"""

CTYPES = {"float16": "__half", "bfloat16": "__nv_bfloat16", "float32": "float", "int32": "int"}


def nvcc() -> str | None:
    return os.environ.get("KSEARCH_NVCC") or shutil.which("nvcc") or (
        "/usr/local/cuda/bin/nvcc" if os.path.exists("/usr/local/cuda/bin/nvcc") else None)


def wrap(name: str, source: str, header: str, inputs: Sequence[tuple[str, str]], outputs: Sequence[tuple[str, str]],
         template: Sequence[tuple[str, object]]) -> str:
    """inputs/outputs: (name, dtype name or 'T'); template: (name, dtype name | int | bool)."""
    params = []
    for n, dt in inputs:
        params.append(f"const {CTYPES.get(dt, 'T')}* {n}")
        if f"{n}_shape" in source:
            params.append(f"const __grid_constant__ Shape {n}_shape")
        if f"{n}_strides" in source:
            params.append(f"const __grid_constant__ Strides {n}_strides")
    params += [f"{CTYPES.get(dt, 'T')}* {n}" for n, dt in outputs]
    decls = []
    for tname, value in template:
        if isinstance(value, bool):
            decls.append(f"constexpr bool {tname} = {'true' if value else 'false'};")
        elif isinstance(value, int):
            decls.append(f"constexpr int {tname} = {value};")
        else:
            decls.append(f"using {tname} = {CTYPES[str(value)]};")
    # Template args become `using`/`constexpr` inside the body in MLX, but the parameter list names T before that:
    # MLX substitutes the concrete type there; we do the same.
    dtype = next((CTYPES[str(v)] for t, v in template if t == "T"), "float")
    sig = ",\n  ".join(p.replace("const T*", f"const {dtype}*").replace("T* ", f"{dtype}* ") for p in params)
    return (f"{header}\nnamespace mlx::core::cu {{\nnamespace cg = cooperative_groups;\n"
            f"__global__ void custom_kernel_{name}(\n  {sig}) {{\n  " + "\n  ".join(decls) + f"\n{source}\n}}\n}}\n")


def compile_check(units: Sequence[str], arch: str = "sm_90a", timeout: float = 300.0) -> tuple[bool, str]:
    """Compile wrapped kernels in one translation unit; (ok, log). Raises FileNotFoundError without nvcc."""
    exe = nvcc()
    if exe is None:
        raise FileNotFoundError("nvcc not found (set KSEARCH_NVCC)")
    with tempfile.TemporaryDirectory(prefix="ks_attn_nvcc_") as tmp:
        path = os.path.join(tmp, "k.cu")
        with open(path, "w") as fh:
            fh.write(PRELUDE + "\n".join(units))
        cmd = [exe, f"-gencode=arch={arch.replace('sm_', 'compute_')},code={arch}", "-std=c++17", "-cubin",
               "-Xptxas", "-v", "-o", os.path.join(tmp, "k.cubin"), path]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=tmp)
    return proc.returncode == 0, proc.stdout + proc.stderr
