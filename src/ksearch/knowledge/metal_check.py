"""Syntax- and type-checking MLX-Metal kernel bodies with clang and our MSL shim (no Metal compiler on Linux).

The body is wrapped the way `mx.fast.metal_kernel` wraps it (MLX 0.32): a `template <typename T, int N, bool B>`
function when template arguments are given, inputs `const device <dtype>* x` (+ `const constant int* x_shape`,
`const constant int64_t* x_strides`, `const constant int& x_ndim` when the body mentions them), outputs
`device <dtype>* out`, and one parameter per Metal attribute name that occurs in the body. MLX's explicit
instantiation line carries attributes clang rejects, so we instantiate by taking the function's address instead.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

from ksearch.backends.msl import MSL_TYPES
from ksearch.knowledge.cuda_check import CompileMessage
from ksearch.knowledge.extract import KernelUse
from ksearch.knowledge.units import translation_unit

SHIM = Path(__file__).with_name("msl_shim.h")
#: MSL's scalar type names: included by the shim, and by the Metal emulation's runtime (metalemu/runtime/ks_types.h).
SCALARS = SHIM.with_name("msl_scalars.h")
METAL_TYPES = MSL_TYPES
UINT3_ATTRS = ("thread_position_in_grid", "thread_position_in_threadgroup", "threadgroup_position_in_grid",
               "threadgroups_per_grid", "threads_per_grid", "threads_per_threadgroup",
               "dispatch_threads_per_threadgroup", "grid_origin", "grid_size")
UINT_ATTRS = ("thread_index_in_threadgroup", "thread_index_in_simdgroup", "thread_index_in_quadgroup",
              "simdgroup_index_in_threadgroup", "quadgroup_index_in_threadgroup", "simdgroups_per_threadgroup",
              "quadgroups_per_threadgroup", "dispatch_simdgroups_per_threadgroup",
              "dispatch_quadgroups_per_threadgroup", "threads_per_simdgroup", "thread_execution_width")
# CUDA names poisoned after the shim: a CUDA-ism in a Metal body becomes a hard error at its line.
POISON = ("__syncthreads __syncwarp __shared__ __global__ __device__ threadIdx blockIdx blockDim gridDim warpSize "
          "atomicAdd atomicCAS atomicMax __shfl_sync __shfl_xor_sync __shfl_down_sync __shfl_up_sync __ballot_sync "
          "__expf __int_as_float __float_as_int __ldg expf sqrtf rsqrtf fmaxf fminf logf")


def clang_path() -> str | None:
    for name in (os.environ.get("KSEARCH_CLANG"), "clang++", "clang++-17", "clang++-16", "clang++-15", "clang++-14"):
        if name and shutil.which(name):
            return shutil.which(name)
    return None


def _mtype(dtype: str | None, default: str) -> str:
    if dtype in (None, "", "T"):
        dtype = default
    return METAL_TYPES.get(dtype or "float32", "float")


def _prepass(body: str) -> str:
    # Literal suffixes clang's lexer rejects: 2.0H -> half(2.0f), 0.5bf -> bfloat(0.5f).
    body = re.sub(r"\b(\d+\.\d*|\.\d+|\d+)(?:[eE][-+]?\d+)?H\b", r"half(\1f)", body)
    return re.sub(r"\b(\d+\.\d*|\.\d+)bf\b", r"bfloat(\1f)", body, flags=re.IGNORECASE)


def wrap_kernel(k: KernelUse, index: int, header_ns: str, dtype: str = "float16") -> str:
    body = _prepass(k.source or "")
    tparams, targs = [], []
    for t in k.template:
        if t.kind == "dtype":
            tparams.append(f"typename {t.name}")
            targs.append(_mtype(t.value, dtype))
        elif t.kind == "bool":
            tparams.append(f"bool {t.name}")
            targs.append("true" if t.value else "false")
        else:
            tparams.append(f"int {t.name}")
            targs.append(str(t.value if t.value is not None else (64 if "DIM" in t.name.upper() else 32)))
    if not any(t.name == "T" for t in k.template) and re.search(r"\bT\b", body):
        tparams.append("typename T")
        targs.append(_mtype(dtype, dtype))
    params, slot = [], 0
    for name in k.input_names:
        params.append(f"const device {_mtype(k.input_dtypes.get(name), dtype)}* {name} [[buffer({slot})]]")
        slot += 1
        for suffix, decl in (("_shape", "const constant int*"), ("_strides", "const constant int64_t*"),
                             ("_ndim", "const constant int&")):
            if f"{name}{suffix}" in body:
                params.append(f"{decl} {name}{suffix} [[buffer({slot})]]")
                slot += 1
    for i, name in enumerate(k.output_names):
        od = k.output_dtypes[i] if i < len(k.output_dtypes) else "T"
        out_type = f"atomic<{_mtype(od, dtype)}>" if k.atomic_outputs else _mtype(od, dtype)
        params.append(f"device {out_type}* {name} [[buffer({slot})]]")
        slot += 1
    for attr in UINT3_ATTRS:
        if attr in body:
            params.append(f"uint3 {attr} [[{attr}]]")
    for attr in UINT_ATTRS:
        if attr in body:
            params.append(f"uint {attr} [[{attr}]]")
    fname = f"custom_kernel_{k.name}_{index}"
    tag = f"kernel{index}_{k.name}"
    head = f"template <{', '.join(tparams)}>\n" if tparams else ""
    inst = f"<{', '.join(targs)}>" if tparams else ""
    return "\n".join([
        f"namespace ks_unit{index} {{", f"using namespace ::{header_ns};",
        f"{head}[[kernel]] void {fname}(\n  " + ",\n  ".join(params) + ") {",
        f'#line 1 "{tag}.body"', body, "}",
        f"static auto* ks_instance_{index} = &{fname}{inst};", "}",
    ])


#: clang's word for a texture or sampler type the shim leaves out. Metal has them, but mx.fast.metal_kernel binds
#: buffers only, so none can reach a kernel it builds: say that, not that Metal lacks the type.
_NO_TEXTURES = re.compile(r"^(?:no template named|unknown type name) '(?P<name>(?:texture|depth)\w*|sampler)'$")


def _explained(msg: str) -> str:
    m = _NO_TEXTURES.match(msg)
    if m is None:
        return msg
    return (f"{m['name']}: mx.fast.metal_kernel binds buffers only, so no texture or sampler reaches its kernels; "
            "read the data from an input buffer")


_DIAG = re.compile(r"^(?P<file>[^:]+):(?P<line>\d+):(?P<col>\d+): (?P<sev>error|warning|fatal error): (?P<msg>.*)$")


def check_kernels(kernels: list[KernelUse], dtype: str = "float16", timeout: float = 60.0) -> list[CompileMessage] | None:
    """clang -fsyntax-only over every resolved kernel (one call); None when clang is missing."""
    clang = clang_path()
    if clang is None:
        return None
    units = [(i, k) for i, k in enumerate(kernels) if k.source is not None]
    if not units:
        return []
    # Poison after the shim so that its own declarations are unaffected, and before any user text.
    # Metal system headers are what the shim stands in for; any other include cannot work in MLX either.
    text = f"#pragma GCC poison {POISON}\n" + translation_unit(
        units, lambda k, i, ns: wrap_kernel(k, i, ns, dtype), header_text=_prepass,
        keep_include=lambda inc: "metal_" not in inc)
    names = {f"kernel{i}_{k.name}": (i, k.name) for i, k in units}
    with tempfile.TemporaryDirectory(prefix="ksearch_msl_") as tmp:
        path = os.path.join(tmp, "candidate.metal.cpp")
        Path(path).write_text(text)
        cmd = [clang, "-x", "c++", "-std=c++17", "-fsyntax-only", "--target=aarch64-linux-gnu", "-nostdinc",
               "-flax-vector-conversions=none", "-Xclang", "-cl-single-precision-constant",
               "-Wno-user-defined-literals", "-Wno-duplicate-decl-specifier", "-Wno-unknown-attributes",
               "-ferror-limit=30", "-include", str(SHIM), path]
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=tmp)
        except subprocess.TimeoutExpired:
            return [CompileMessage("", None, "warning", f"clang took more than {timeout:.0f} s; check skipped")]
    out: list[CompileMessage] = []
    for raw in proc.stderr.splitlines():
        m = _DIAG.match(raw.strip())
        if not m or m["sev"] == "warning":
            continue
        stem, _, part = os.path.basename(m["file"]).rpartition(".")
        index, kernel = names.get(stem, (None, ""))
        line = int(m["line"]) if kernel and part == "body" else None
        where = "" if part == "body" else f" (in {part if kernel else os.path.basename(m['file'])})"
        out.append(CompileMessage(kernel, line, "error", _explained(m["msg"].strip()) + where, index))
    if proc.returncode != 0 and not out:
        out.append(CompileMessage("", None, "error", "clang failed: " + " | ".join(proc.stderr.splitlines()[-3:])))
    return out
