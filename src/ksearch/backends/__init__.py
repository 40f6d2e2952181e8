"""Where candidates run: MLX on Metal, on CUDA, or on the CPU."""

from ksearch.backends.detect import (
    BACKEND_NAMES,
    Backend,
    BackendUnavailable,
    available_backends,
    best_backend,
    code_backend,
    emulation_note,
    environment,
    get_backend,
)

__all__ = [
    "BACKEND_NAMES",
    "Backend",
    "BackendUnavailable",
    "available_backends",
    "best_backend",
    "code_backend",
    "emulation_note",
    "environment",
    "get_backend",
]
