"""What a tensor-core attention candidate does with float32 inputs (policy/templates/attention_common.py): the 3xTF32
kernel of kernels/attention/tf32x3.py, text for text, where it applies (D 64 / 128; the mask with L <= S), the row
kernel elsewhere; run here with a recording stand-in for MLX's kernel calls."""

from __future__ import annotations

import math
from types import SimpleNamespace
from typing import Any

import pytest

from ksearch.kernels.attention import tf32x3
from ksearch.policy.templates.attention_common import RUN_HEAD, fallbacks


class _Kernel:
    def __init__(self, calls: list[tuple[str, dict[str, Any]]], **made: Any) -> None:
        self.calls, self.made = calls, made

    def __call__(self, **kw: Any) -> list[str]:
        self.calls.append((self.made["name"], kw))
        return [self.made["name"]]


def _candidate() -> tuple[dict[str, Any], list[tuple[str, dict[str, Any]]]]:
    calls: list[tuple[str, dict[str, Any]]] = []
    made: list[dict[str, Any]] = []

    def kernel(**kw: Any) -> _Kernel:
        made.append(kw)
        return _Kernel(calls, **kw)

    mx = SimpleNamespace(float32="float32", float16="float16", bfloat16="bfloat16",
                         array=lambda x, dtype=None: x, fast=SimpleNamespace(cuda_kernel=kernel))
    scope: dict[str, Any] = {"mx": mx, "math": math}
    exec(fallbacks() + RUN_HEAD + "    return 'tensor cores'\n", scope)  # noqa: S102
    scope["made"] = made
    return scope, calls


def _arr(*shape: int, dtype: str = "float32") -> Any:
    return SimpleNamespace(shape=shape, dtype=dtype)


def test_the_candidate_carries_the_librarys_kernel_with_its_shared_memory() -> None:
    scope, _ = _candidate()
    made = {m["name"]: m for m in scope["made"]}
    for d in (64, 128):
        m = made[f"attention_tf32x3_d{d}"]
        assert m["source"] == tf32x3.default_config(d).source() and m["header"] == tf32x3.TF32X3_HEADER
        assert m["shared_memory"] == tf32x3.default_config(d).smem_bytes(d)


@pytest.mark.parametrize("d,blocks,threads", [(64, 2, 128), (128, 1, 256)])
def test_float32_goes_to_three_tf32_products_launched_as_the_library_launches_them(d: int, blocks: int,
                                                                                  threads: int) -> None:
    scope, calls = _candidate()
    q, k = _arr(2, 8, 100, d), _arr(2, 2, 300, d)
    assert scope["run"](q, k, k, True) == f"attention_tf32x3_d{d}"
    _, kw = calls[-1]
    cfg = tf32x3.default_config(d)
    assert kw["template"] == [("T", "float32"), ("D", d), *tf32x3.template_args(cfg, True)]
    # ceil(100 / BM) blocks of BM / 16 warps; the library's launch (cuda_prefill.shape_launch) takes the same
    assert cfg.bm // 16 * 32 == threads and -(-100 // cfg.bm) == blocks
    assert kw["grid"] == (blocks * threads, 2 * 8, 1) and kw["threadgroup"] == (threads, 1, 1)


@pytest.mark.parametrize("q_shape,k_shape,causal", [((1, 4, 64, 96), (1, 4, 64, 96), False),
                                                    ((1, 4, 300, 64), (1, 4, 100, 64), True)])
def test_what_the_kernel_cannot_take_goes_to_the_row_kernel(q_shape: tuple[int, ...], k_shape: tuple[int, ...],
                                                           causal: bool) -> None:
    scope, calls = _candidate()
    assert scope["run"](_arr(*q_shape), _arr(*k_shape), _arr(*k_shape), causal) == "attention_rows_f32"


def test_half_precision_stays_with_the_candidates_own_kernel() -> None:
    scope, calls = _candidate()
    q = _arr(1, 4, 128, 128, dtype="float16")
    assert scope["run"](q, q, q, False) == "tensor cores" and not calls
