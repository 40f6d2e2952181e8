"""MLX's kernel constructors replaced by recorders, for tests of what the library and the template families make and
call where no GPU runs them: each kernel made hands back zeros of its outputs' shapes when called."""

from __future__ import annotations

from typing import Any

import pytest

Made = list[dict[str, Any]]
Calls = list[tuple[str, dict[str, Any]]]


def record_kernels(monkeypatch: pytest.MonkeyPatch, factory: str = "cuda_kernel") -> tuple[Made, Calls]:
    """`mx.fast.<factory>` (cuda_kernel or metal_kernel) replaced for the test: (the keywords of each kernel made,
    (its name, the keywords of each call))."""
    import mlx.core as mx

    made: Made = []
    calls: Calls = []

    def make(**kw: Any) -> Any:
        made.append(kw)

        def call(**ckw: Any) -> list[Any]:
            calls.append((str(kw["name"]), ckw))
            return [mx.zeros(s, dtype=t) for s, t in zip(ckw["output_shapes"], ckw["output_dtypes"], strict=True)]
        return call

    monkeypatch.setattr(mx.fast, factory, make)
    return made, calls
