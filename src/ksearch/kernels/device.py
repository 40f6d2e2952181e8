"""Where the kernels would run and which of them are enabled there: shared by the attention and decode dispatch."""

from __future__ import annotations

from functools import cache
from typing import Any

from ksearch.config import env_switch


def metal_emulated() -> bool:
    """Whether `mx.fast.metal_kernel` is the Metal emulation (the workers of the mlx-metal-emu backend put it in
    place): Metal kernels run here although MLX itself runs on the CPU."""
    import mlx.core as mx

    return getattr(mx.fast.metal_kernel, "metal_emulation", None) is not None


def backend() -> str:
    """'cuda', 'metal' or 'cpu': where the default stream runs ('metal' under the Metal emulation). Asked on every
    call of a library kernel, so the answer is kept per (metal_kernel function, default device type), the two things
    that can change it in a process: working it out took 6 us a call, a third of a small decode call's Python work."""
    import mlx.core as mx

    key = (mx.fast.metal_kernel, mx.default_device().type)
    where = _BACKENDS.get(key)
    if where is None:
        where = _BACKENDS[key] = _backend()
    return where


_BACKENDS: dict[tuple[Any, Any], str] = {}


def _backend() -> str:
    import mlx.core as mx

    if metal_emulated():
        return "metal"
    if mx.default_device().type != mx.gpu:
        return "cpu"
    if getattr(mx, "cuda", None) is not None and mx.cuda.is_available():
        return "cuda"
    if mx.metal.is_available():
        return "metal"
    return "cpu"


def metal_enabled(use_metal: bool | None = None) -> bool:
    """use_metal as passed, else KSEARCH_METAL_KERNELS read strictly: a value that is not on or off (a typo) is a
    ConfigError rather than the Metal kernels switched on."""
    if use_metal is not None:
        return use_metal
    return env_switch("KSEARCH_METAL_KERNELS", False)


def kernels_absent(use_metal: bool | None = None) -> str | None:
    """Why the library's own attention and decode kernels do not run on the default device, or None where they do.
    Where they do not, `attention()` and `decode()` call MLX's attention, so timing them against it would time MLX
    against itself."""
    where = backend()
    if where == "cuda" or (where == "metal" and metal_enabled(use_metal)):
        return None
    if where == "metal":
        return ("on Metal the library's attention and decode kernels are opt-in until they are measured on Apple "
                "hardware: set KSEARCH_METAL_KERNELS=1 to time them")
    return ("on the CPU the library's attention and decode kernels fall back to MLX's own attention: run this on an "
            "NVIDIA GPU (MLX's CUDA build) or on a Mac with KSEARCH_METAL_KERNELS=1")


@cache
def hopper() -> bool:
    """Whether the CUDA device runs wgmma (compute capability 9.x: H100, H200, H800, H20, GH200)."""
    import mlx.core as mx

    try:
        info = mx.device_info()
    except Exception:  # noqa: BLE001 - an MLX without device_info: assume not, the mma.sync kernel runs anywhere
        return False
    return int(info.get("compute_capability_major", 0)) == 9 or str(info.get("architecture", "")).startswith("sm_90")


CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT = 16


@cache
def cuda_sm_count() -> int:
    """Streaming multiprocessors of CUDA device 0 (the device MLX runs on), from the driver: MLX does not report it.
    BackendUnavailable without a driver that answers; a persistent kernel sizes its grid by it."""
    import ctypes

    from ksearch.errors import BackendUnavailable

    try:
        lib = ctypes.CDLL("libcuda.so.1")
    except OSError as exc:
        raise BackendUnavailable(f"the SM count needs the CUDA driver (libcuda.so.1): {exc}") from exc
    dev, count = ctypes.c_int(), ctypes.c_int()
    if (lib.cuInit(0) or lib.cuDeviceGet(ctypes.byref(dev), 0)
            or lib.cuDeviceGetAttribute(ctypes.byref(count), CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, dev)):
        raise BackendUnavailable("the CUDA driver did not report device 0's multiprocessor count")
    return count.value
