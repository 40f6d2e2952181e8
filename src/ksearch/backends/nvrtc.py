"""NVRTC, the compiler MLX's CUDA backend runs on a custom kernel's source at its first call, loaded without a GPU.

nvcc accepts what NVRTC refuses (gcc's builtins such as `__builtin_memcpy` or `__builtin_huge_valf` pass nvcc's
front end and fail NVRTC's), so a translation is only known to compile for MLX once NVRTC itself has compiled it.
NVRTC needs no device: the library of the `nvidia-cuda-nvrtc` wheel (the `dev` extra on Linux x86-64), or of a CUDA
toolkit, compiles for any GPU architecture on any Linux machine.

Where the library is looked for: $KSEARCH_NVRTC (a path to libnvrtc.so*), the `nvidia` wheels' `cu13` / `cuda_nvrtc`
folders, then $CUDA_HOME / $CUDA_PATH / /usr/local/cuda. The CUDA headers (cuda_fp16.h, cooperative_groups.h,
cuda/std/...) come from the same installation.
"""

from __future__ import annotations

import ctypes
import functools
import glob
import importlib.util
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from ksearch.backends.nvcc import PRELUDE


@dataclass(frozen=True)
class Nvrtc:
    library: str
    includes: tuple[str, ...]


def _roots() -> list[Path]:
    roots: list[Path] = []
    spec = importlib.util.find_spec("nvidia")
    for base in (spec.submodule_search_locations or []) if spec else []:
        roots += [Path(base) / "cu13", Path(base) / "cuda_nvrtc", Path(base) / "cu12"]
    for var in ("CUDA_HOME", "CUDA_PATH"):
        if os.environ.get(var):
            roots.append(Path(os.environ[var]))
    roots.append(Path("/usr/local/cuda"))
    return roots


def _includes(root: Path) -> tuple[str, ...]:
    return tuple(str(p) for p in (root / "include", root / "include" / "cccl") if (p / ".").is_dir())


@functools.lru_cache(maxsize=1)
def find_nvrtc() -> Nvrtc | None:
    """The NVRTC library and its include folders, or None where none is installed."""
    explicit = os.environ.get("KSEARCH_NVRTC")
    if explicit:
        path = Path(explicit)
        return Nvrtc(str(path), _includes(path.parent.parent)) if path.is_file() else None
    for root in _roots():
        for lib_dir in (root / "lib", root / "lib64"):
            found = sorted(glob.glob(str(lib_dir / "libnvrtc.so*")))
            libs = [f for f in found if "builtins" not in f]
            if libs and (root / "include" / "cuda_fp16.h").is_file():
                return Nvrtc(libs[0], _includes(root))
    return None


def _load(library: str) -> ctypes.CDLL:
    """libnvrtc, its builtins library loaded first from the same folder: NVRTC opens that one by name at its first
    compile, and the 13.0 wheels' libnvrtc has no search path of its own (13.0.48: "failed to open
    libnvrtc-builtins.so.13.0"), where later wheels find it beside themselves."""
    for builtins in sorted(glob.glob(str(Path(library).parent / "libnvrtc-builtins.so*"))):
        ctypes.CDLL(builtins, mode=ctypes.RTLD_GLOBAL)
    return ctypes.CDLL(library)


def nvrtc_check(units: Sequence[str], arch: str = "sm_90a", std: str = "c++17") -> tuple[bool, str]:
    """Compile PRELUDE and `units` (wrapped kernels, headers) as one program with NVRTC, to machine code for `arch`
    (ptxas runs inside NVRTC); (ok, NVRTC's log). Raises FileNotFoundError where NVRTC is not installed."""
    found = find_nvrtc()
    if found is None:
        raise FileNotFoundError("NVRTC not found: pip install nvidia-cuda-nvrtc, or set KSEARCH_NVRTC to libnvrtc.so")
    lib = _load(found.library)
    prog = ctypes.c_void_p()
    text = (PRELUDE + "\n".join(units)).encode()
    status = lib.nvrtcCreateProgram(ctypes.byref(prog), text, b"candidate.cu", 0, None, None)
    if status != 0:
        return False, f"nvrtcCreateProgram failed with status {status}"
    try:
        opts = [f"--gpu-architecture={arch}", f"--std={std}",
                *(f"--include-path={d}" for d in found.includes)]
        argv = (ctypes.c_char_p * len(opts))(*[o.encode() for o in opts])
        status = lib.nvrtcCompileProgram(prog, len(opts), argv)
        size = ctypes.c_size_t()
        lib.nvrtcGetProgramLogSize(prog, ctypes.byref(size))
        log = ctypes.create_string_buffer(size.value)
        lib.nvrtcGetProgramLog(prog, log)
        return status == 0, log.value.decode(errors="replace")
    finally:
        lib.nvrtcDestroyProgram(ctypes.byref(prog))
