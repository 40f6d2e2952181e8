"""The dialect linter: cheap static checks of a candidate's kernels before anything compiles or runs.

`lint_source(source, backend, task)` is what the harness calls before every evaluation, so the default path is pure
Python (AST + regexes, milliseconds). `deep=True` adds the real compilers: clang over our MSL shim for Metal bodies,
nvcc -arch=sm_90a over an MLX-equivalent wrapper for MLX-CUDA bodies. Errors mean the candidate cannot work as
written (wrong dialect, over the hardware's memory limit, forbidden API, a `run` the harness cannot call: see
entry.py); warnings are heuristics.
"""

from __future__ import annotations

import ast
import math
import re
from typing import TYPE_CHECKING

from ksearch.backends import code_backend
from ksearch.knowledge.diagnostic import Diagnostic, py_line
from ksearch.knowledge.entry import check_entry
from ksearch.knowledge.extract import KernelUse, find_kernels
from ksearch.knowledge.forbidden import ForbiddenUse, scan_forbidden
from ksearch.knowledge.lint_rules import (
    COMMON_WARNINGS,
    CUDA_IN_METAL,
    METAL_IN_CUDA,
    Rule,
    line_of,
    strip_comments,
)

if TYPE_CHECKING:
    from ksearch.tasks.base import Task

# Limits of the representative profiles (backends/data/hardware.yaml): Apple 32 KB threadgroup memory; Hopper 48 KB static
# shared memory per block and 227 KB with the dynamic opt-in (MLX raises the attribute above 48,000 bytes).
METAL_TG_BYTES = 32 * 1024
CUDA_STATIC_SMEM = 48 * 1024
CUDA_MAX_SMEM = 227 * 1024
MAX_THREADS = 1024
_SIZES = {"float": 4, "half": 2, "float16_t": 2, "bfloat16_t": 2, "bfloat": 2, "__half": 2, "__nv_bfloat16": 2,
          "int": 4, "uint": 4, "unsigned": 4, "int32_t": 4, "uint32_t": 4, "short": 2, "ushort": 2, "char": 1,
          "uchar": 1, "int8_t": 1, "uint8_t": 1, "int64_t": 8, "uint64_t": 8, "long": 8, "ulong": 8, "double": 8,
          "float2": 8, "float4": 16, "half2": 4, "half4": 8, "__half2": 4, "int2": 8, "int4": 16, "bool": 1,
          "size_t": 8}
BACKENDS = ("mlx-cuda", "mlx-metal", "mlx-cpu", "mlx-metal-emu")  # an emulation is linted as the backend it emulates


def _tensor_dtypes(task: Task | None) -> dict[str, str]:
    if task is None:
        return {}
    return {t.name: ("T" if t.dtype == "workload" else t.dtype) for t in task.inputs}


def _template_ints(k: KernelUse) -> dict[str, int]:
    # Only values known statically: a guessed value could invent an overflow (the compile checks guess instead).
    return {t.name: t.value for t in k.template if t.kind == "int" and t.value is not None}


def _eval_dim(expr: str, consts: dict[str, int]) -> int | None:
    """A compile-time array dimension (ints, template ints, constexpr ints, + - * / ( ))."""
    text = expr
    for name, value in sorted(consts.items(), key=lambda kv: -len(kv[0])):
        text = re.sub(rf"\b{re.escape(name)}\b", str(value), text)
    if not re.fullmatch(r"[\d\s+\-*/()]+", text):
        return None
    try:
        return int(eval(text.replace("/", "//"), {"__builtins__": {}}))  # noqa: S307 - digits and operators only
    except (SyntaxError, ZeroDivisionError, ValueError):
        return None


def _static_arrays(body: str, keyword: str, consts: dict[str, int],
                   dtypes: dict[str, int] | None = None) -> tuple[int, int | None, list[str]]:
    """Bytes of `<keyword> type a[d1][d2], b[d3];` declarations; (total, line of the first, unknown-size names).
    `dtypes` gives the byte size of template type parameters (T -> 4 when the dtype is unknown: the worst case)."""
    total, first, unknown = 0, None, []
    sizes = {**_SIZES, **(dtypes or {})}
    pat = re.compile(rf"\b{keyword}\s+(?:static\s+)?(?:const\s+)?([A-Za-z_][\w:]*)\s+([^;]+);")
    for m in pat.finditer(body):
        size = sizes.get(m.group(1).split("::")[-1])
        for decl in re.finditer(r"(\w+)\s*((?:\[[^\]]+\])+)", m.group(2)):
            first = first or line_of(body, m.start())
            values = [_eval_dim(d, consts) for d in re.findall(r"\[([^\]]+)\]", decl.group(2))]
            if size is None or any(v is None for v in values):
                unknown.append(decl.group(1))
                continue
            total += size * math.prod(v for v in values if v is not None)
    return total, first, unknown


_DTYPE_BYTES = {"float16": 2, "bfloat16": 2, "float32": 4, "int32": 4, "uint32": 4, "int8": 1, "uint8": 1,
                "int16": 2, "uint16": 2, "int64": 8, "uint64": 8, "bool": 1, "float64": 8}


def _template_dtypes(k: KernelUse) -> dict[str, int]:
    return {t.name: _DTYPE_BYTES.get(str(t.value), 4) for t in k.template if t.kind == "dtype"} or {"T": 4}


def _constexprs(body: str, known: dict[str, int]) -> dict[str, int]:
    """`constexpr int A = 32, B = 2 * TPB;` declarations, evaluated in order on top of the template ints."""
    out = dict(known)
    for m in re.finditer(r"\b(?:constexpr|const)\s+(?:int|uint|unsigned|size_t|short)\s+([^;]+);", body):
        for decl in m.group(1).split(","):
            name, eq, expr = decl.partition("=")
            v = _eval_dim(expr, out) if eq else None
            if v is not None and re.fullmatch(r"\s*\w+\s*", name):
                out[name.strip()] = v
    return out


def _apply(rules: list[Rule], body: str, k: KernelUse, severity: str) -> list[Diagnostic]:
    out, seen = [], set()
    for pattern, code, message, concept in rules:
        m = pattern.search(body)
        if m and message not in seen:
            seen.add(message)
            out.append(Diagnostic(severity, code, f"{k.name}: {message} (concept: {concept})",
                                  py_line(k, line_of(body, m.start()))))
    return out


def _bank_conflicts(body: str, keyword: str, k: KernelUse, consts: dict[str, int]) -> list[Diagnostic]:
    out = []
    pat = re.compile(rf"\b{keyword}\s+(float|int|uint|unsigned)\s+(\w+)\s*\[([^\]]+)\]\s*\[([^\]]+)\]")
    for m in pat.finditer(body):
        outer, inner = _eval_dim(m.group(3), consts), _eval_dim(m.group(4), consts)
        # A square-ish tile (both dims indexed by threads) whose rows are a whole number of bank cycles; small
        # leading dims (double buffers, per-warp slots) are indexed uniformly and do not conflict.
        if outer is not None and inner is not None and outer >= 8 and inner >= 32 and inner % 32 == 0:
            out.append(Diagnostic("warning", "bank-conflict",
                                  f"{k.name}: `{m.group(2)}[..][{inner}]` of 4-byte words: threads reading a column hit "
                                  f"one bank {min(inner, 32)}-way; pad the row to {inner + 1} (concept: bank_conflicts)",
                                  py_line(k, line_of(body, m.start()))))
    return out


_THREAD_VARYING = (r"threadIdx|thread_position_in_grid|thread_position_in_threadgroup|thread_index_in_\w+|"
                   r"simdgroup_index_in_threadgroup|thread_rank")


def _thread_varying_names(body: str) -> set[str]:
    """Local names whose value differs between threads of one group (derived from a thread index)."""
    names: set[str] = set()
    for _ in range(3):  # a few rounds let derivations chain (lane -> idx -> row)
        for m in re.finditer(r"\b(?:const\s+)?(?:int|uint|unsigned|size_t|long|auto|bool|short)\s+([^;()]+(?:\([^;]*)?);",
                             body):
            for decl in m.group(1).split(","):
                name, eq, expr = decl.partition("=")
                name = name.strip()
                if eq and re.fullmatch(r"\w+", name) and (
                        re.search(_THREAD_VARYING, expr) or any(re.search(rf"\b{re.escape(n)}\b", expr) for n in names)):
                    names.add(name)
    return names


def _early_return(body: str, barrier: str, k: KernelUse) -> list[Diagnostic]:
    """A `return` guarded by a thread-varying condition before a barrier (block-uniform exits are fine)."""
    bar = re.search(barrier, body)
    if not bar:
        return []
    varying = _thread_varying_names(body)
    for m in re.finditer(r"\bif\s*\(([^;{}]*)\)\s*return\b", body[:bar.start()]):
        cond = m.group(1)
        if re.search(_THREAD_VARYING, cond) or any(re.search(rf"\b{re.escape(n)}\b", cond) for n in varying):
            return [Diagnostic("warning", "barrier-after-return",
                               f"{k.name}: a thread-dependent `return` precedes a barrier: threads that returned never "
                               "reach it (undefined behaviour / hang); guard the work instead of returning early "
                               "(concept: syncthreads)", py_line(k, line_of(body, m.start())))]
    return []


def _lint_metal(k: KernelUse) -> list[Diagnostic]:
    body = strip_comments(k.source or "")
    consts = _constexprs(body, _template_ints(k))
    diags = _apply(CUDA_IN_METAL, body, k, "error")
    m = re.search(r"\bthreadgroup_barrier\s*\(\s*\)", body)
    if m:
        diags.append(Diagnostic("error", "msl-api", f"{k.name}: threadgroup_barrier needs a flag: "
                                "threadgroup_barrier(mem_flags::mem_threadgroup)", py_line(k, line_of(body, m.start()))))
    if "mem_device_and_threadgroup" in body:
        diags.append(Diagnostic("error", "msl-api", f"{k.name}: mem_device_and_threadgroup is gone since MSL 1.2: "
                                "mem_flags::mem_device | mem_flags::mem_threadgroup", py_line(k, None)))
    m = re.search(r"simdgroup_matrix\s*<\s*\w+\s*,\s*(\d+)\s*,\s*(\d+)\s*>", body)
    if m and (m.group(1), m.group(2)) != ("8", "8"):
        diags.append(Diagnostic("error", "msl-api", f"{k.name}: simdgroup_matrix is 8x8 only",
                                py_line(k, line_of(body, m.start()))))
    if "threads_per_simdgroup" in body and "thread_execution_width" in body:
        diags.append(Diagnostic("error", "msl-api", f"{k.name}: mention only one of threads_per_simdgroup / "
                                "thread_execution_width: MLX declares both attributes and Metal rejects that",
                                py_line(k, None)))
    m = re.search(r"\b(?:uint|int|size_t)\s+\w+\s*=\s*(thread_position_in_grid|thread_position_in_threadgroup|"
                  r"threadgroup_position_in_grid)\s*;", body)
    if m:
        diags.append(Diagnostic("error", "msl-api", f"{k.name}: {m.group(1)} is a uint3 in MLX bodies: use .x",
                                py_line(k, line_of(body, m.start()))))
    # Arrays sized by values only known at run time are left to the compile check and the device.
    total, first, _unknown = _static_arrays(body, "threadgroup", consts, _template_dtypes(k))
    if total > METAL_TG_BYTES:
        diags.append(Diagnostic("error", "threadgroup-memory",
                                f"{k.name}: {total} bytes of threadgroup memory; Apple GPUs allow {METAL_TG_BYTES} "
                                "(32 KB) per threadgroup: shrink the tiles (concept: shared_memory)",
                                py_line(k, first)))
    diags += _bank_conflicts(body, "threadgroup", k, consts)
    diags += _early_return(body, r"\bthreadgroup_barrier\s*\(", k)
    return diags


def _lint_cuda(k: KernelUse) -> list[Diagnostic]:
    body = strip_comments(k.source or "")
    consts = _constexprs(body, _template_ints(k))
    diags = _apply(METAL_IN_CUDA, body, k, "error") + _apply(COMMON_WARNINGS, body, k, "warning")
    total, first, _unknown = _static_arrays(body, "__shared__", consts, _template_dtypes(k))
    dynamic = k.shared_memory or 0
    if total > CUDA_STATIC_SMEM:
        diags.append(Diagnostic("error", "shared-memory", f"{k.name}: {total} bytes of static __shared__ memory; the "
                                f"static limit is {CUDA_STATIC_SMEM} (48 KB): use `extern __shared__` with "
                                "shared_memory= for more (up to 227 KB on Hopper)", py_line(k, first)))
    elif total + dynamic > CUDA_MAX_SMEM:
        diags.append(Diagnostic("error", "shared-memory", f"{k.name}: {total + dynamic} bytes of shared memory; "
                                f"Hopper allows {CUDA_MAX_SMEM} (227 KB) per block", py_line(k, first)))
    m = re.search(r"\bextern\s+__shared__", body)
    if m and not dynamic:
        diags.append(Diagnostic("error", "shared-memory", f"{k.name}: `extern __shared__` needs shared_memory=<bytes> "
                                "in mx.fast.cuda_kernel(...), else the block gets 0 bytes",
                                py_line(k, line_of(body, m.start()))))
    tg = math.prod(k.threadgroup) if k.threadgroup else None
    if "wgmma" in body and tg is not None and tg % 128:
        diags.append(Diagnostic("error", "wgmma-warpgroup", f"{k.name}: wgmma needs whole warpgroups (128 threads); "
                                f"threadgroup={k.threadgroup} is an illegal instruction that poisons the CUDA context",
                                py_line(k, None)))
    global_index = re.search(r"blockIdx\.\w\s*\*\s*blockDim|blockDim\.\w\s*\*\s*blockIdx|thread_rank\s*\(", body)
    guarded = re.search(r"\bif\s*\([^;{]*(<|>|>=|<=)", body) or re.search(r"\bfor\s*\([^;]*;[^;]*(<|>)", body)
    if global_index and not guarded:
        diags.append(Diagnostic("warning", "bounds-check", f"{k.name}: no bounds check found: MLX launches "
                                "ceil(grid/threadgroup) blocks, so the last block's extra threads run too; add "
                                "`if (idx >= n) return;` (concept: bounds_check)",
                                py_line(k, line_of(body, global_index.start()))))
    cluster = re.search(r"\b__cluster_dims__\b|\bcluster_dims\s*\(", strip_comments(k.header or "") + "\n" + body)
    if cluster:
        diags.append(Diagnostic("warning", "cluster-graphs", f"{k.name}: a kernel with cluster dims: under MLX 0.32's "
                                "CUDA graphs (the default), later custom kernels without cluster dims silently do not "
                                "run once it has; only with MLX_USE_CUDA_GRAPHS=0 (concept: clusters)", py_line(k, None)))
    diags += _bank_conflicts(body, "__shared__", k, consts)
    diags += _early_return(body, r"\b__syncthreads\s*\(", k)
    return diags


def _parse(source: str) -> tuple[ast.Module | None, list[Diagnostic]]:
    try:
        return ast.parse(source), []
    except SyntaxError as exc:
        return None, [Diagnostic("error", "syntax", f"Python syntax error: {exc.msg}", exc.lineno)]


def _kernels(source: str, task: Task | None) -> tuple[list[KernelUse], list[Diagnostic]]:
    tree, diags = _parse(source)
    return (find_kernels(source, _tensor_dtypes(task), tree) if tree else []), diags


def _forbidden(tree: ast.Module, task: Task | None, uses: list[ForbiddenUse] | None) -> list[Diagnostic]:
    if uses is None:
        if task is None or not task.forbidden:
            return []
        uses = scan_forbidden(tree, task.forbidden)
    return [Diagnostic("error", "forbidden-api", uses[0].message, uses[0].line)] if uses else []


def _entry(tree: ast.Module, task: Task | None) -> list[Diagnostic]:
    return [Diagnostic("error", p.code, p.message, p.line) for p in check_entry(tree, task)]


def lint_source(source: str, backend: str, task: Task | None = None, deep: bool = False,
                forbidden_uses: list[ForbiddenUse] | None = None) -> list[Diagnostic]:
    """Diagnostics for a candidate's source on `backend` (mlx-cuda, mlx-metal, mlx-cpu). `forbidden_uses` is the
    forbidden-API scan's result when the caller has run it already (the harness does, in its static checks), so a
    candidate is scanned once; without it the linter scans against the task's forbidden list."""
    if backend not in BACKENDS:
        raise ValueError(f"unknown backend {backend!r}; choose one of {', '.join(BACKENDS)}")
    backend = code_backend(backend)
    tree, diags = _parse(source)
    if tree is None:
        return diags
    kernels = find_kernels(source, _tensor_dtypes(task), tree)
    diags = _forbidden(tree, task, forbidden_uses) + _entry(tree, task)
    for k in kernels:
        if backend == "mlx-cpu":
            diags.append(Diagnostic("error", "no-custom-kernels", f"{k.dialect}_kernel {k.name!r}: MLX has no custom "
                                    "kernels on the CPU backend: use MLX ops (mx.compile fuses elementwise chains)",
                                    k.line))
            continue
        if (backend == "mlx-metal") != (k.dialect == "metal"):
            want = "mx.fast.metal_kernel (MSL)" if backend == "mlx-metal" else "mx.fast.cuda_kernel (CUDA C++)"
            diags.append(Diagnostic("error", "wrong-dialect", f"{k.dialect}_kernel {k.name!r} cannot run on {backend}: "
                                    f"use {want}", k.line))
            continue
        if k.source is None:
            diags.append(Diagnostic("warning", "unresolved-source", f"{k.name}: kernel source could not be resolved "
                                    f"statically ({k.unresolved}); only the compiler will check it", k.line))
            continue
        if k.threadgroup and math.prod(k.threadgroup) > MAX_THREADS:
            diags.append(Diagnostic("error", "threadgroup-size", f"{k.name}: threadgroup {k.threadgroup} has more "
                                    f"than {MAX_THREADS} threads", k.line))
        diags += _lint_metal(k) if k.dialect == "metal" else _lint_cuda(k)
    if deep and backend != "mlx-cpu":
        from ksearch.knowledge.deep import deep_check

        # Each dtype the task's GPU workloads use (the wrapper's types change with it); without a task, float32:
        # every tensor is then assumed to share one dtype, and fp16 guesses would report false ambiguities.
        for dtype in _gpu_dtypes(task):
            # What does not depend on the dtype (no compiler here, a header not resolved) is said once.
            diags += [d for d in deep_check(kernels, "metal" if backend == "mlx-metal" else "cuda", dtype)
                      if d not in diags]
    return diags


def _gpu_dtypes(task: Task | None) -> list[str]:
    if task is None:
        return ["float32"]
    dtypes = sorted({w.dtype for w in task.workloads if w.tier == "gpu"})
    return dtypes or sorted({w.dtype for w in task.workloads}) or ["float32"]


def check_cuda_candidate(source: str, task: Task | None, dtype: str = "float16") -> list[Diagnostic]:
    """Deep check of every mx.fast.cuda_kernel in a candidate: nvcc -arch=sm_90a over MLX's wrapper."""
    from ksearch.knowledge.deep import deep_check

    kernels, diags = _kernels(source, task)
    return diags or _unresolved(kernels, "cuda") + deep_check([k for k in kernels if k.dialect == "cuda"], "cuda", dtype)


def check_metal_candidate(source: str, task: Task | None, dtype: str = "float16") -> list[Diagnostic]:
    """Deep check of every mx.fast.metal_kernel in a candidate: clang -fsyntax-only with the MSL shim."""
    from ksearch.knowledge.deep import deep_check

    kernels, diags = _kernels(source, task)
    return diags or _unresolved(kernels, "metal") + deep_check([k for k in kernels if k.dialect == "metal"], "metal",
                                                               dtype)


def _unresolved(kernels: list[KernelUse], dialect: str) -> list[Diagnostic]:
    return [Diagnostic("warning", "unresolved-source", f"{k.name}: kernel source could not be resolved statically "
                       f"({k.unresolved}); not compile-checked", k.line)
            for k in kernels if k.dialect == dialect and k.source is None]


def lint_file_kind(source: str) -> str:
    """'python' for a candidate module; used by the CLI to reject a raw .cu/.metal file with a clear message."""
    try:
        ast.parse(source)
        return "python"
    except SyntaxError:
        return "other"
