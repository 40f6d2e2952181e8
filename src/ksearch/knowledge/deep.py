"""Deep checks: the real compilers over MLX-equivalent wrappers, turned into linter diagnostics."""

from __future__ import annotations

from ksearch.knowledge.cuda_check import compile_kernels
from ksearch.knowledge.diagnostic import Diagnostic, py_line
from ksearch.knowledge.extract import KernelUse
from ksearch.knowledge.metal_check import check_kernels

MISSING = {
    "cuda": "nvcc not found: the MLX-CUDA compile check did not run (install the CUDA toolkit or set KSEARCH_NVCC)",
    "metal": "clang++ not found: the MSL syntax check did not run (apt-get install clang, or set KSEARCH_CLANG)",
}


def deep_check(kernels: list[KernelUse], dialect: str, dtype: str = "float16") -> list[Diagnostic]:
    # A header built at run time (constants written into it per dtype or shape) is not known here: compiling the
    # body without it would report its names as undefined, so such a kernel is left to the compiler at its first call.
    later = [Diagnostic("warning", "unresolved-header", f"{k.name}: kernel header could not be resolved statically "
                        f"({k.header_unresolved}); not compile-checked", k.line)
             for k in kernels if k.dialect == dialect and k.source is not None and k.header_unresolved]
    mine = [k for k in kernels if k.dialect == dialect and k.source is not None and not k.header_unresolved]
    if not mine:
        return later
    messages = compile_kernels(mine, dtype) if dialect == "cuda" else check_kernels(mine, dtype)
    if messages is None:
        return later + [Diagnostic("warning", "deep-check-skipped", MISSING[dialect])]
    by_index = dict(enumerate(mine))
    code = "nvcc" if dialect == "cuda" else "msl-compile"
    out = []
    for m in messages:
        if m.severity != "error":
            continue
        k = by_index.get(m.index) if m.index is not None else None
        line = py_line(k, m.line) if k is not None else None
        prefix = f"{m.kernel}: " if m.kernel else ""
        out.append(Diagnostic("error", code, f"{prefix}{m.text} (dtype {dtype})", line))
    return later + out
