"""The Metal template families' `constants` (gqa_decode.metal.split_k, attention.metal.flash_simdgroup): a rendering
makes each kernel at its first call with its template arguments as program-scope constants of its header, byte for
byte as the library's Metal kernels carry them, calls it without `template=`, and computes what MLX's attention does
on the Metal emulation."""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest
from recorded_kernels import Calls, Made, record_kernels

from ksearch.backends.detect import clang_path
from ksearch.kernels.attention import metal_fragments, metal_rows, metal_simdgroup
from ksearch.kernels.decode import metal_split_k
from ksearch.kernels.kernel_text import compact, metal_constant_lines
from ksearch.policy.templates import attention as attn_t
from ksearch.policy.templates import gqa_decode as dec_t

mx = pytest.importorskip("mlx.core")
DECODE = next(f for f in dec_t.FAMILIES if f.id == "gqa_decode.metal.split_k")
FLASH = next(f for f in attn_t.FAMILIES if f.id == "attention.metal.flash_simdgroup")


def _module(fam: Any, params: dict[str, Any]) -> dict[str, Any]:
    namespace: dict[str, Any] = {}
    exec(compile(fam.source(params), "candidate", "exec"), namespace)  # noqa: S102 - our own rendering
    return namespace


def _recorded(fam: Any, params: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> tuple[dict[str, Any], Made, Calls]:
    made, calls = record_kernels(monkeypatch, "metal_kernel")
    return _module(fam, params), made, calls


def _rand(shape: tuple[int, ...], dtype: Any, seed: int) -> Any:
    return mx.random.normal(shape, key=mx.random.key(seed)).astype(dtype)


def _reference(q: Any, k: Any, v: Any, causal: bool) -> np.ndarray:
    f = mx.float32
    mask = "causal" if causal else None
    out = mx.fast.scaled_dot_product_attention(q.astype(f), k.astype(f), v.astype(f), scale=1 / math.sqrt(q.shape[-1]),
                                               mask=mask)
    return np.array(out)


def test_off_by_default_in_both_families() -> None:
    for fam in (DECODE, FLASH):
        assert fam.default()["constants"] is False and fam.valid({**fam.default(), "constants": True})


def test_the_decode_familys_kernels_carry_the_librarys_constants(monkeypatch: pytest.MonkeyPatch) -> None:
    params = {**DECODE.default(), "target_blocks": 256, "warps": 4, "unroll": 2, "constants": True}
    ns, made, calls = _recorded(DECODE, params, monkeypatch)
    assert made == []  # nothing made before the first call
    q = mx.zeros((1, 8, 1, 64), dtype=mx.bfloat16)
    kc = mx.zeros((1, 2, 600, 64), dtype=mx.bfloat16)
    for length in (500, 500, 600, 100):  # 4 splits (the one-read merge), 5 (the tiled merge), one split
        ns["run"](q, kc, kc, length)
    assert len(made) == 4 and all("template" not in kw for _, kw in calls)
    split = [("T", mx.bfloat16), ("D", 64), ("G", 4), ("NW", 4), ("U", 2)]
    # the library's own header for the same kernels (kernel_text.metal_constant_lines), byte for byte
    by_source = {compact(m["source"]): m["header"] for m in made}
    assert by_source[compact(metal_split_k.DECODE_SPLIT_SOURCE)] == metal_constant_lines(split)
    assert by_source[compact(metal_split_k.DECODE_MERGE_SOURCE)] == metal_constant_lines(split[:3])
    assert by_source[compact(metal_split_k.DECODE_ONE_SPLIT_SOURCE)] == metal_constant_lines(split)
    assert by_source[compact(metal_split_k.DECODE_MERGE_FEW_SOURCE)] == metal_constant_lines(
        [*split[:3], ("NF", metal_split_k.MERGE_FEW)])
    launched = [name.rsplit("_", 1)[0] for name, _ in calls]
    assert launched == ["gqa_split_k", "gqa_lse_merge_few"] * 2 + ["gqa_split_k", "gqa_lse_merge", "gqa_one_split"]
    ns["run"](q.astype(mx.float16), kc.astype(mx.float16), kc.astype(mx.float16), 100)
    assert len(made) == 8 and len({m["name"] for m in made}) == 8  # a set of its own per dtype, each named apart


def test_the_prefill_familys_kernels_carry_the_librarys_constants(monkeypatch: pytest.MonkeyPatch) -> None:
    params = {**FLASH.default(), "constants": True}
    ns, made, calls = _recorded(FLASH, params, monkeypatch)
    assert made == []
    q, k = mx.zeros((1, 4, 64, 128), dtype=mx.float16), mx.zeros((1, 2, 64, 128), dtype=mx.float16)
    for _ in range(2):
        ns["run"](q, k, k, True)
        ns["run"](q.astype(mx.float32), k.astype(mx.float32), k.astype(mx.float32), True)
        ns["run"](q.astype(mx.bfloat16), k.astype(mx.bfloat16), k.astype(mx.bfloat16), False)
    assert len(made) == 3 and len(calls) == 6 and all("template" not in kw for _, kw in calls)
    headers = {(compact(m["source"]), m["header"]) for m in made}
    for dtype in (mx.float16, mx.float32):  # float32 on the matrix units too, at the library's float32 block
        assert (compact(metal_simdgroup.SOURCE), metal_constant_lines(
            [("T", dtype), ("D", 128), ("BK", metal_simdgroup.block_keys(128, dtype.size)), ("CAUSAL", True),
             ("CRESCALE", metal_simdgroup.CRESCALE)])) in headers
    assert (compact(metal_rows.PREFILL_SOURCE), metal_constant_lines(
        [("T", mx.bfloat16), ("D", 128), ("NT", metal_rows.PREFILL_NT), ("BN", metal_rows.PREFILL_BN),
         ("CAUSAL", False)])) in headers


def test_the_prefill_familys_float32_rows_knob_keeps_float32_on_the_row_kernel(monkeypatch: pytest.MonkeyPatch) -> None:
    ns, made, _ = _recorded(FLASH, {**FLASH.default(), "constants": True, "float32": "rows"}, monkeypatch)
    q, k = mx.zeros((1, 4, 64, 64), dtype=mx.float32), mx.zeros((1, 2, 64, 64), dtype=mx.float32)
    ns["run"](q, k, k, False)
    assert [compact(m["source"]) for m in made] == [compact(metal_rows.PREFILL_SOURCE)]


@pytest.fixture
def emulated() -> Any:
    """The Metal emulation's CPU engine in place of mx.fast.metal_kernel for one test."""
    if clang_path() is None:
        pytest.skip("clang++ not installed: the Metal emulation needs it")
    from ksearch.metalemu import surface

    mx.set_default_device(mx.cpu)
    restore = surface.install("cpu")
    yield
    restore()


@pytest.mark.slow
@pytest.mark.parametrize("length", [100, 500, 600], ids=["one_split", "few_splits", "splits"])
def test_the_decode_familys_constants_rendering_matches_mlx_on_the_emulation(emulated: Any, length: int) -> None:
    ns = _module(DECODE, {**DECODE.default(), "target_blocks": 256, "unroll": 2, "constants": True})
    q = _rand((1, 8, 1, 64), mx.float16, 1)
    kc, vc = _rand((1, 2, 600, 64), mx.float16, 2), _rand((1, 2, 600, 64), mx.float16, 3)
    got = np.array(ns["run"](q, kc, vc, length).astype(mx.float32))
    want = _reference(q, kc[:, :, :length], vc[:, :, :length], False)
    np.testing.assert_allclose(got, want, atol=2e-2, rtol=2e-2)


@pytest.mark.slow
@pytest.mark.parametrize("dtype", ["float16", "float32", "bfloat16"], ids=["simdgroup", "simdgroup-f32", "rows"])
def test_the_prefill_familys_constants_rendering_matches_mlx_on_the_emulation(emulated: Any, dtype: str) -> None:
    ns = _module(FLASH, {**FLASH.default(), "constants": True})
    dt = getattr(mx, dtype)
    q, k, v = _rand((1, 2, 40, 64), dt, 4), _rand((1, 1, 48, 64), dt, 5), _rand((1, 1, 48, 64), dt, 6)
    got = np.array(ns["run"](q, k, v, True).astype(mx.float32))
    np.testing.assert_allclose(got, _reference(q, k, v, True), atol=2e-2, rtol=2e-2)


REGISTERS = {**FLASH.default(), "softmax": "registers", "bk128": 32, "bk64": 64}


def test_the_prefill_familys_register_softmax_carries_its_constants(monkeypatch: pytest.MonkeyPatch) -> None:
    assert FLASH.valid(REGISTERS)
    ns, made, calls = _recorded(FLASH, {**REGISTERS, "constants": True}, monkeypatch)
    q, k = mx.zeros((1, 4, 64, 128), dtype=mx.float16), mx.zeros((1, 2, 64, 128), dtype=mx.float16)
    ns["run"](q, k, k, True)
    assert [compact(m["source"]) for m in made] == [compact(metal_fragments.SOURCE)] and len(calls) == 1
    assert made[0]["header"] == metal_constant_lines([("T", mx.float16), ("D", 128), ("BK", 32), ("CAUSAL", True),
                                                      ("CRESCALE", metal_simdgroup.CRESCALE)])


@pytest.mark.parametrize("constants", [False, True], ids=["template", "constants"])
def test_the_prefill_familys_register_softmax_matches_mlx_on_the_emulation(emulated: Any, constants: bool) -> None:
    """`softmax: registers` renders metal_fragments' kernel at its longer blocks, its template arguments passed or
    carried as constants, and computes MLX's attention (GQA, causal, blocks that do not divide the lengths)."""
    ns = _module(FLASH, {**REGISTERS, "constants": constants})
    for d in (64, 128):
        q, k, v = _rand((1, 4, 40, d), mx.float16, 7), _rand((1, 2, 72, d), mx.float16, 8), _rand((1, 2, 72, d),
                                                                                                mx.float16, 9)
        got = np.array(ns["run"](q, k, v, True).astype(mx.float32))
        np.testing.assert_allclose(got, _reference(q, k, v, True), atol=2e-2, rtol=2e-2)
