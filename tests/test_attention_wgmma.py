"""The wgmma prefill kernel (never run: see ksearch/kernels/attention_wgmma.py) compiles for sm_90a with nvcc at every
variant the GPU check tries, with no register spills; it is off unless KSEARCH_WGMMA=1."""

from __future__ import annotations

import itertools

import pytest

from ksearch.kernels import attention_cuda
from ksearch.kernels import attention_wgmma as W
from ksearch.kernels.attention_nvcc import compile_check, nvcc, wrap


def _units(combos: list[tuple[str, int, int, bool, int, bool]]) -> list[str]:
    units = [W.HEADER]
    for i, (dt, d, wg, causal, vmode, swap) in enumerate(combos):
        units.append(wrap(f"wg{i}", W.SOURCE, "", [("q", "T"), ("k", "T"), ("v", "T"), ("scale", "float32")],
                          [("o", "T")], [("T", dt), ("D", d), ("WG", wg), ("CAUSAL", causal), ("VMODE", vmode),
                                         ("LS_SWAP", swap)]))
    return units


@pytest.mark.slow
@pytest.mark.skipif(nvcc() is None, reason="nvcc not installed")
def test_wgmma_prefill_compiles_for_sm90a_without_spills() -> None:
    combos = [("float16", 128, 1, c, v, s) for c, v, s in itertools.product((False, True), (0, 1), (False, True))]
    combos += [("bfloat16", 64, 2, True, 1, False), ("float16", 64, 1, False, 0, False)]
    ok, log = compile_check(_units(combos))
    assert ok, log[-3000:]
    assert "bytes spill" not in log.replace(" 0 bytes spill", ""), "register spills"


@pytest.mark.skipif(nvcc() is None, reason="nvcc not installed")
def test_a_malformed_wgmma_is_rejected() -> None:
    # The compile check must be able to fail: m64n72 with a 36-register accumulator is not a valid wgmma shape.
    bad = W.HEADER.replace("m64n64k16", "m64n72k16", 1)
    units = _units([("float16", 64, 1, False, 1, False)])
    units[0] = bad
    ok, _log = compile_check(units)
    assert not ok


def test_wgmma_config_fits_shared_memory() -> None:
    for wg in (1, 2):
        assert W.WgmmaConfig(wg=wg).smem_bytes(128) <= attention_cuda.MAX_SMEM


def test_wgmma_is_taken_only_when_opted_in(monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib

    mx = pytest.importorskip("mlx.core")
    A = importlib.import_module("ksearch.kernels.attention")

    monkeypatch.setattr(A, "_backend", lambda: "cuda")
    monkeypatch.setattr(W, "attention_wgmma", lambda *a: "wgmma")
    monkeypatch.setattr(attention_cuda, "attention_cuda", lambda *a: "mma_sync")
    q = mx.zeros((1, 4, 128, 64), dtype=mx.float16)
    k = mx.zeros((1, 2, 128, 64), dtype=mx.float16)
    monkeypatch.delenv("KSEARCH_WGMMA", raising=False)
    assert A.attention(q, k, k) == "mma_sync"
    monkeypatch.setenv("KSEARCH_WGMMA", "1")
    assert A.attention(q, k, k, causal=True) == "wgmma"
    assert A.attention(q[:, :, :100], k[:, :, :100], k[:, :, :100]) != "wgmma"  # L=100: not a multiple of 64
