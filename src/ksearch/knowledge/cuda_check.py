"""The linter's deep CUDA check: a candidate's resolved `cuda_kernel` bodies compiled with nvcc, each wrapped the way
`mx.fast.cuda_kernel` wraps it (ksearch.backends.nvcc), nvcc's diagnostics mapped back to the kernels' own lines.

All kernels of a candidate go into one translation unit (knowledge/units.py), each body after a `#line` marker that
names the kernel, so that each error points at a line of its own kernel body.
"""

from __future__ import annotations

import os
import re
import subprocess
from dataclasses import dataclass

from ksearch.backends.nvcc import TemplateValue, compile_check, nvcc_path, wrap
from ksearch.knowledge.extract import KernelUse
from ksearch.knowledge.units import translation_unit


@dataclass
class CompileMessage:
    kernel: str  # kernel name, or "" for the prelude/wrapper
    line: int | None  # line within the kernel body
    severity: str  # "error" | "warning"
    text: str
    index: int | None = None  # position of the kernel in the list that was compiled


def _template(k: KernelUse) -> list[tuple[str, TemplateValue]]:
    out: list[tuple[str, TemplateValue]] = []
    for t in k.template:
        if t.kind == "dtype":
            out.append((t.name, t.value if isinstance(t.value, str) else None))
        elif t.kind == "bool":
            out.append((t.name, bool(t.value)))
        else:
            # An int we could not resolve gets a representative power of two (a head dim, a tile size).
            out.append((t.name, t.value if isinstance(t.value, int) else (64 if "DIM" in t.name.upper() else 32)))
    return out


def wrap_kernel(k: KernelUse, index: int, header_ns: str, dtype: str = "float16") -> str:
    """The kernel function as MLX would generate it, in its own namespace, with #line markers into the body."""
    outputs = [(n, k.output_dtypes[i] if i < len(k.output_dtypes) else "T") for i, n in enumerate(k.output_names)]
    return wrap(f"{k.name}_{index}", k.source or "", "", [(n, k.input_dtypes.get(n, "T")) for n in k.input_names],
                outputs, _template(k), dtype=dtype, scope=f"ks_unit{index}", uses=header_ns,
                body_file=f"kernel{index}_{k.name}.body")


_DIAG = re.compile(r'^"?(?P<file>[^"(]+)"?\((?P<line>\d+)\): (?P<sev>error|warning)[^:]*: (?P<msg>.*)$')
_PTXAS = re.compile(r"ptxas (?P<sev>error|fatal|warning)\s*:\s*(?P<msg>.*)")


def compile_kernels(kernels: list[KernelUse], dtype: str = "float16", arch: str = "sm_90a",
                    timeout: float = 300.0, chunk: int = 40, jobs: int = 1) -> list[CompileMessage] | None:
    """Compile every resolved kernel; None when nvcc is missing. Kernels go `chunk` to a translation unit (nvcc's
    start-up dominates small units, huge ones compile slowly), `jobs` units at a time. Each message carries the
    kernel's index in `kernels`, so callers that compile many templates at once can tell them apart."""
    if nvcc_path() is None:
        return None
    units = [(i, k) for i, k in enumerate(kernels) if k.source is not None]
    groups = [units[g:g + max(1, chunk)] for g in range(0, len(units), max(1, chunk))]
    if jobs > 1 and len(groups) > 1:
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(max_workers=jobs) as pool:
            results = list(pool.map(lambda g: _compile_unit(g, dtype, arch, timeout), groups))
    else:
        results = [_compile_unit(g, dtype, arch, timeout) for g in groups]
    return [m for r in results for m in r]


def _compile_unit(units: list[tuple[int, KernelUse]], dtype: str, arch: str, timeout: float) -> list[CompileMessage]:
    text = translation_unit(units, lambda k, i, ns: wrap_kernel(k, i, ns, dtype))
    names = {f"kernel{i}_{k.name}": (i, k.name) for i, k in units}
    try:
        ok, log = compile_check([text], arch, timeout)
    except subprocess.TimeoutExpired:
        return [CompileMessage("", None, "error", f"nvcc took more than {timeout:.0f} s (kernels "
                               f"{units[0][0]}..{units[-1][0]}); not checked")]
    out: list[CompileMessage] = []
    for raw in log.splitlines():
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
    if not ok and not any(m.severity == "error" for m in out):
        tail = log.strip().splitlines()[-3:]
        out.append(CompileMessage("", None, "error", "nvcc failed: " + " | ".join(tail)))
    return out
