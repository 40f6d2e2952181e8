# Bad candidate: dereferences NULL -> the worker dies of SIGSEGV. Expected: runtime_error.
import ctypes

import mlx.core as mx


def run(x):
    ctypes.string_at(0)
    return mx.zeros_like(x)
