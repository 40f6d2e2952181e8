"""Stand-in inputs for a custom kernel's optional arguments (no h0, no conv bias, no conv state).

Why not reuse another input as the stand-in: MLX's custom-kernel API says nothing about one array passed as two
inputs, so each call passes distinct arrays, one small placeholder per role. (We suspected repeated inputs of the
H200's wrong Mamba outputs; a stage-by-stage diagnosis showed they were not the cause (benchmarks/findings.md): a broadcast A was. The
placeholders stay because the calls are unambiguous with them.)
"""

from __future__ import annotations

import mlx.core as mx

_CACHE: dict[str, mx.array] = {}


def placeholder(role: str) -> mx.array:
    """A 1-element float32 array owned by `role`, never the same array for two roles."""
    a = _CACHE.get(role)
    if a is None:
        a = _CACHE[role] = mx.zeros((1,), dtype=mx.float32)
        mx.eval(a)
    return a
