"""Detecting MLX backends and describing the machine they run on."""

from __future__ import annotations

import functools
import os
import platform
import shutil
import subprocess
import sys
from dataclasses import dataclass
from typing import Any, Literal

from ksearch.backends.profiles import emulated_profile, profile_for
from ksearch.errors import BackendUnavailable

BACKEND_NAMES = ("mlx-metal", "mlx-cuda", "mlx-cpu", "mlx-metal-emu")
Family = Literal["cpu", "cuda", "metal"]

#: A backend that runs the kernels of another one (an emulation) -> that backend: its candidates are written in that
#: backend's dialect, from its starters, templates, spec and linter rules.
RUNS_CODE_OF = {"mlx-metal-emu": "mlx-metal"}

#: What `ksearch backends` says of an emulation.
EMULATION_NOTES = {
    # Kept short: reports print it in an 80-column table, and "not a Metal speed" must stay readable on one line.
    "mlx-metal-emu": "Metal kernels (mx.fast.metal_kernel) run by an emulation on this machine: a correctness "
                     "verdict counts; a time is the emulator's, not a Metal speed",
}


#: KSEARCH_EMU_ENGINE: which engine runs mlx-metal-emu's kernels: "cpu" (C++ on this machine's CPU, with the checks),
#: or "cuda" (translated to CUDA and run on an NVIDIA GPU through mx.fast.cuda_kernel, at the GPU tier, without them).
EMU_ENGINES = ("cpu", "cuda")


def emulation_engine() -> str:
    """The engine KSEARCH_EMU_ENGINE names (default cpu); anything else is a one-line error."""
    engine = os.environ.get("KSEARCH_EMU_ENGINE", "cpu").strip().lower() or "cpu"
    if engine not in EMU_ENGINES:
        raise BackendUnavailable(f"KSEARCH_EMU_ENGINE={engine!r} is not an engine; choose one of "
                                 f"{', '.join(EMU_ENGINES)}")
    return engine


def emulation_note(name: str | None) -> str | None:
    """What an emulated backend's times are (None for a real device): every figure of one carries it."""
    return EMULATION_NOTES.get(name or "")


def code_backend(name: str) -> str:
    """The backend whose kernels `name` runs: itself, or for an emulation the backend it emulates."""
    return RUNS_CODE_OF.get(name, name)


@dataclass(frozen=True)
class Backend:
    name: str
    family: Family
    #: Where an emulated dialect runs: "cpu" (the Metal emulation's C++ engine), or None for the real device.
    emulation: str | None = None

    @property
    def is_gpu(self) -> bool:
        """Whether candidates run on a GPU (an emulation on the CPU does not: CPU tiers, timeouts, no floors)."""
        return self.family != "cpu" and self.emulation != "cpu"

    @property
    def emulated(self) -> bool:
        """Times measured here are the emulator's, never the emulated device's."""
        return self.emulation is not None

    @property
    def code_backend(self) -> str:
        return code_backend(self.name)

    @property
    def tier(self) -> Literal["cpu", "gpu"]:
        return "gpu" if self.is_gpu else "cpu"

    @property
    def dialect(self) -> str | None:
        """The kernel language candidates may write: "metal", "cuda", or None (MLX ops only)."""
        return None if self.family == "cpu" else self.family

    def profile(self) -> dict[str, Any]:
        if self.emulated:
            # The timing pools must outgrow the cache of the device the emulation runs on: the GPU's L2 for the
            # CUDA engine, this CPU's last-level cache for the C++ engine.
            host = profile_for("cuda", _device_name("cuda")) if self.emulation == "cuda" else None
            return emulated_profile(self.name, host["llc_bytes"] if host else None)
        return profile_for(self.family, device_name(self))


FAMILY = {"mlx-metal": "metal", "mlx-cuda": "cuda", "mlx-cpu": "cpu", "mlx-metal-emu": "metal"}


def clang_path() -> str | None:
    """The C++ compiler the Metal emulation builds kernels with (KSEARCH_CLANG, else clang++ on PATH)."""
    for name in (os.environ.get("KSEARCH_CLANG"), "clang++", "clang++-18", "clang++-17", "clang++-16", "clang++-15",
                 "clang++-14"):
        if name and shutil.which(name):
            return shutil.which(name)
    return None


@functools.cache
def _probe() -> dict[str, bool]:
    try:
        import mlx.core as mx
    except ImportError:
        return {"mlx": False, "metal": False, "cuda": False, "clang": False}
    metal = bool(getattr(mx, "metal", None) and mx.metal.is_available())
    cuda = bool(getattr(mx, "cuda", None) and mx.cuda.is_available())
    return {"mlx": True, "metal": metal, "cuda": cuda, "clang": clang_path() is not None}


def available_backends() -> list[Backend]:
    p = _probe()
    if not p["mlx"]:
        return []
    found = []
    if p["metal"]:
        found.append(Backend("mlx-metal", "metal"))
    if p["cuda"]:
        found.append(Backend("mlx-cuda", "cuda"))
    found.append(Backend("mlx-cpu", "cpu"))
    engine = emulation_engine()
    if (engine == "cpu" and p["clang"]) or (engine == "cuda" and p["cuda"]):
        # Last: an emulation is never the default; it is asked for by name.
        found.append(Backend("mlx-metal-emu", "metal", emulation=engine))
    return found


def best_backend() -> Backend:
    found = [b for b in available_backends() if not b.emulated]
    if not found:
        raise BackendUnavailable(
            "MLX is not installed: pip install 'kernelsearch[cpu]' (Linux CPU), 'kernelsearch[cuda]' (NVIDIA) "
            "or 'kernelsearch' on macOS"
        )
    return found[0]


def get_backend(name: str | None) -> Backend:
    """A backend by name (None or "auto": the best one here), or a one-line error saying what exists."""
    if name in (None, "", "auto"):
        return best_backend()
    if name not in FAMILY:
        raise BackendUnavailable(f"unknown backend {name!r}; choose one of {', '.join(BACKEND_NAMES)} or auto")
    for b in available_backends():
        if b.name == name:
            return b
    here = ", ".join(b.name for b in available_backends()) or "none (MLX missing)"
    why = ""
    if name == "mlx-metal-emu" and _probe()["mlx"]:
        why = (" (KSEARCH_EMU_ENGINE=cuda needs MLX with CUDA and an NVIDIA GPU)" if emulation_engine() == "cuda"
               else " (it needs clang++ on PATH or KSEARCH_CLANG: apt-get install clang)")
    raise BackendUnavailable(f"backend {name} is not available on this machine{why}; available: {here}")


@functools.cache
def _nvidia_driver() -> str | None:
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=driver_version,name", "--format=csv,noheader"],
            capture_output=True, text=True, timeout=10,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip().splitlines()[0] if out.returncode == 0 and out.stdout.strip() else None


def device_name(backend: Backend) -> str:
    if backend.emulated:
        if backend.emulation == "cuda":
            return f"Apple GPU emulated on {_device_name('cuda')}"
        return f"Apple GPU emulated on the CPU ({platform.processor() or platform.machine()})"
    return _device_name(backend.family)


def _device_name(family: str) -> str:
    """The name of the device MLX runs on, for a backend of `family`."""
    try:
        import mlx.core as mx

        info = mx.device_info() if hasattr(mx, "device_info") else {}
    except Exception:  # no MLX device info on some builds; the name is informational only
        info = {}
    name = str(info.get("device_name") or info.get("name") or "")
    if family == "cuda" and not name:
        drv = _nvidia_driver()
        name = drv.split(",", 1)[1].strip() if drv and "," in drv else "NVIDIA GPU"
    if family == "cpu" and not name:
        name = platform.processor() or platform.machine()
    return name


def environment(backend: Backend) -> dict[str, Any]:
    """Hardware and versions attached to every result."""
    try:
        import mlx.core as mx

        mlx_version = getattr(mx, "__version__", None)
    except ImportError:
        mlx_version = None
    from ksearch import __version__

    env: dict[str, Any] = {
        "backend": backend.name,
        "device": device_name(backend),
        "mlx": mlx_version,
        "ksearch": __version__,
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "cpu_count": os.cpu_count(),
    }
    if backend.family == "cuda":
        drv = _nvidia_driver()
        env["driver"] = drv.split(",", 1)[0].strip() if drv else None
    if backend.emulated:
        env["emulation"] = backend.emulation
        env["timing"] = emulation_note(backend.name) or "times are the emulator's, not the device's"
        env["compiler"] = clang_path()
    return env
