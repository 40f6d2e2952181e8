"""Compiling a translated Metal kernel without a GPU: the CUDA source wrapped the way mx.fast.cuda_kernel wraps it.

With NVRTC (ksearch.backends.nvrtc; the compiler MLX itself runs, no GPU needed): the text MLX would compile, MLX's
device utils stood in for by nvcc.PRELUDE. With nvcc (ksearch.backends.nvcc): a full compile for sm_90a (nvcc accepts
gcc builtins that NVRTC refuses, so NVRTC is preferred). Without either: a C++20 compiler (clang++ or g++) checks the same text as host code against cuda_host.h, the CUDA
builtins written for the host (-fsyntax-only). Diagnostics name the Metal kernel and the lines of its source= or
header=, or of the file that created it (surface_lines), as the CPU engine's errors do.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from ksearch.backends.nvcc import compile_check, nvcc_path, wrap
from ksearch.backends.nvrtc import find_nvrtc, nvrtc_check
from ksearch.metalemu.cuda_kernel import LAUNCH, CudaSource

HOST_HEADER = Path(__file__).with_name("cuda_host.h")
_NVCC_DIAG = re.compile(r'^"?(?P<file>[^"(]+)"?\((?P<line>\d+)\): (?P<sev>error|warning)[^:]*: (?P<msg>.*)$')
_GCC_DIAG = re.compile(r"^(?P<file>[^:]+):(?P<line>\d+):(?:\d+:)? (?P<sev>error|fatal error|warning): (?P<msg>.*)$")


@dataclass(frozen=True)
class Diagnostic:
    file: str  # "<kernel>.metal", "<kernel>.header.metal", or the generated wrapper
    line: int | None
    message: str
    kernel: str = ""  # the Metal kernel's name
    place: str | None = None  # the line as the user counts it, for a line of the Metal body or header

    def __str__(self) -> str:
        if self.place:
            return f"metal_kernel {self.kernel!r} at {self.place}: {self.message}"
        return f"{self.file}:{self.line}: {self.message}" if self.line else f"{self.file}: {self.message}"


def host_compiler() -> str | None:
    for name in (os.environ.get("KSEARCH_HOST_CXX"), "clang++", "g++"):
        if name and shutil.which(name):
            return shutil.which(name)
    return None


def wrapped(src: CudaSource, input_dtypes: Sequence[str], output_dtypes: Sequence[str]) -> str:
    """The kernel function MLX generates around the body, with the header in front."""
    inputs = list(zip(src.input_names[:-1], input_dtypes, strict=True)) + [(LAUNCH, "int32")]
    outputs = list(zip(src.output_names, output_dtypes, strict=True))
    return wrap(src.name, src.source, src.header, inputs, outputs)


def check(src: CudaSource, input_dtypes: Sequence[str], output_dtypes: Sequence[str], *, use_nvcc: bool | None = None,
          use_nvrtc: bool | None = None, timeout: float = 300.0) -> list[Diagnostic] | None:
    """Errors of the translated kernel (empty: it compiles); None when no compiler exists. By default NVRTC, else nvcc,
    else the host compiler; use_nvrtc / use_nvcc force one (True) or skip it (False)."""
    text = wrapped(src, input_dtypes, output_dtypes)
    if (use_nvrtc is None and use_nvcc is None and find_nvrtc() is not None) or use_nvrtc:
        ok, log = nvrtc_check([text])
        return _parse(log, _NVCC_DIAG, ok, src)
    if (use_nvcc is None and nvcc_path() is not None) or use_nvcc:
        ok, log = compile_check([text], timeout=timeout)
        return _parse(log, _NVCC_DIAG, ok, src)
    cxx = host_compiler()
    if cxx is None:
        return None
    with tempfile.TemporaryDirectory(prefix="ksearch_emu_") as tmp:
        path = os.path.join(tmp, "kernel.cpp")
        Path(path).write_text(text)
        proc = subprocess.run([cxx, "-std=c++20", "-fsyntax-only", "-x", "c++", "-Wno-unknown-pragmas",
                               "-include", str(HOST_HEADER), path], capture_output=True, text=True, timeout=timeout)
    return _parse(proc.stderr, _GCC_DIAG, proc.returncode == 0, src)


def _parse(log: str, pattern: re.Pattern[str], ok: bool, src: CudaSource) -> list[Diagnostic]:
    out: list[Diagnostic] = []
    for raw in log.splitlines():
        m = pattern.match(raw.strip())
        if m and m["sev"] != "warning":
            file, line = os.path.basename(m["file"]), int(m["line"])
            out.append(Diagnostic(file, line, m["msg"].strip(), src.name, src.place(file, line)))
    if not ok and not out:
        out.append(Diagnostic("compiler", None, " | ".join(log.strip().splitlines()[-3:]), src.name))
    return out
