"""The compiler's resource report of a candidate's CUDA kernels: registers per thread, spills, shared memory.

The same nvcc compile as the linter's deep check (knowledge/cuda_check.py: every kernel wrapped as MLX wraps it, one
translation unit, `-Xptxas -v`), read for ptxas's `info` lines instead of its errors. Needs nvcc only, no GPU.
"""

from __future__ import annotations

import re
import subprocess
from dataclasses import asdict, dataclass
from typing import Any

from ksearch.backends.nvcc import compile_check, nvcc_path
from ksearch.knowledge.cuda_check import wrap_kernel
from ksearch.knowledge.extract import KernelUse, find_kernels
from ksearch.knowledge.units import translation_unit

_ENTRY = re.compile(r"ptxas info\s*:\s*(?:Compiling entry function|Function properties for) '?(?P<sym>[^'\s]+)'?")
_NAME = re.compile(r"custom_kernel_(?P<name>\w+?)_(?P<index>\d+)E")
_FRAME = re.compile(r"(?P<stack>\d+) bytes stack frame, (?P<stores>\d+) bytes spill stores, "
                    r"(?P<loads>\d+) bytes spill loads")
_USED = re.compile(r"Used (?P<regs>\d+) registers")
_SMEM = re.compile(r"(?P<smem>\d+) bytes smem")


@dataclass
class KernelResources:
    kernel: str
    registers: int | None = None
    spill_store_bytes: int = 0
    spill_load_bytes: int = 0
    stack_bytes: int = 0
    static_smem_bytes: int = 0

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def parse_ptxas(log: str) -> list[KernelResources]:
    """Per kernel (MLX's `custom_kernel_<name>_<index>` symbols; other functions are skipped), what ptxas -v said:
    its `Compiling entry function` / `Function properties for` line, then the stack-frame and `Used N registers`
    lines that follow it."""
    found: dict[str, KernelResources] = {}
    current: KernelResources | None = None
    for line in log.splitlines():
        m = _ENTRY.search(line)
        if m:
            n = _NAME.search(m["sym"])
            current = found.setdefault(n["name"], KernelResources(n["name"])) if n else None
            continue
        if current is None:
            continue
        if f := _FRAME.search(line):
            current.stack_bytes = int(f["stack"])
            current.spill_store_bytes, current.spill_load_bytes = int(f["stores"]), int(f["loads"])
        if u := _USED.search(line):
            current.registers = int(u["regs"])
            s = _SMEM.search(line)
            current.static_smem_bytes = int(s["smem"]) if s else 0
    return list(found.values())


def resource_report(source: str, input_dtypes: dict[str, str] | None = None, dtype: str = "float16",
                    arch: str = "sm_90a", timeout: float = 300.0) -> tuple[list[KernelResources], str | None]:
    """(per-kernel resources, None) for a candidate's resolved `mx.fast.cuda_kernel` bodies, or ([], why not) when
    nvcc is missing, the source has no kernel nvcc can see, or the compile failed."""
    if nvcc_path() is None:
        return [], "nvcc not found: no compiler resource report (install the CUDA toolkit or set KSEARCH_NVCC)"
    try:
        kernels = [k for k in find_kernels(source, input_dtypes or {}) if k.dialect == "cuda" and k.source]
    except SyntaxError as exc:
        return [], f"the source does not parse: {exc.msg}"
    if not kernels:
        return [], "no mx.fast.cuda_kernel body could be resolved statically: no compiler resource report"
    units: list[tuple[int, KernelUse]] = list(enumerate(kernels))
    text = translation_unit(units, lambda k, i, ns: wrap_kernel(k, i, ns, dtype))
    try:
        ok, log = compile_check([text], arch, timeout)
    except subprocess.TimeoutExpired:
        return [], f"nvcc took more than {timeout:.0f} s: no compiler resource report"
    if not ok:
        return [], "nvcc failed on the kernels: no compiler resource report"
    return parse_ptxas(log), None
