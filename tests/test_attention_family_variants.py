"""The flash_wgmma family's persistent kernels by call shape (`sections`: `_hs`, `tail`: `_kt`): a rendering picks
the kernel the library's dispatch takes at every benchmark shape, launches `_kt` with the library's counters and
records, carries the library's kernel texts, and refuses the knobs where they do not apply."""

from __future__ import annotations

import importlib
import itertools
from typing import Any

import pytest
from recorded_kernels import Calls, Made, record_kernels

from ksearch.kernels import device
from ksearch.kernels.attention import wgmma_ws as WS
from ksearch.kernels.attention import wgmma_ws_grid as GRID
from ksearch.kernels.attention import wgmma_ws_tail as KT
from ksearch.kernels.kernel_text import constant_lines
from ksearch.policy.templates.attention_wgmma import FLASH_WGMMA, configs
from ksearch.policy.templates.attention_wgmma_variants import variant_configs

mx = pytest.importorskip("mlx.core")
A = importlib.import_module("ksearch.kernels.attention")


def _candidate(params: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> tuple[dict[str, Any], Made, Calls]:
    made, calls = record_kernels(monkeypatch)
    namespace: dict[str, Any] = {}
    exec(compile(FLASH_WGMMA.source(params), "candidate", "exec"), namespace)  # noqa: S102 - our own rendering
    namespace["_HOPPER"] = True
    namespace["cuda_sm_count"] = lambda: 132  # the H100's and the H200's; no driver here
    namespace["_tmap"] = lambda _shape, _bn: mx.zeros((16,), dtype=mx.uint64)
    return namespace, made, calls  # `made`: the module's own kernels too (without `constants`, all of them)


def test_the_first_choice_is_the_librarys_dispatch_and_the_knobs_need_persistent_blocks() -> None:
    p = FLASH_WGMMA.default()
    assert p["sections"] and p["tail"] and FLASH_WGMMA.valid(p)
    _, ws = configs(p)
    assert variant_configs(ws, p) == {"plain": A.WIDE_PERSIST, "hs": A.WIDE_SECTIONS, "kt": A.WIDE_SPLIT_TAIL}
    tall = {**p, "wg": 2, "bn": 128, "stages": 3, "crescale": False, "row_sums_once": False, "exp_ahead": False, "tail": False}
    assert FLASH_WGMMA.valid(tall) and variant_configs(configs(tall)[1], tall)["hs"] == A.TALL_SECTIONS
    for bad in ({"persist": False}, {"persist": False, "tail": False}, {"persist": False, "sections": False},
                {"wg": 2, "bn": 128, "stages": 3, "crescale": False, "row_sums_once": False, "exp_ahead": False}):  # `_kt` measured with three warpgroups only
        assert not FLASH_WGMMA.valid({**p, **bad}), bad
    valid = [q for q in FLASH_WGMMA.all_params() if FLASH_WGMMA.valid(q)]
    assert {(q["sections"], q["tail"]) for q in valid if q["persist"] and q["wg"] == 3} == set(
        itertools.product((True, False), repeat=2))


@pytest.mark.parametrize("sections,tail", [(True, True), (True, False), (False, True)])
def test_each_call_takes_the_kernel_the_librarys_dispatch_takes(sections: bool, tail: bool,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    p = {**FLASH_WGMMA.default(), "sections": sections, "tail": tail}
    ns, _, _ = _candidate(p, monkeypatch)
    monkeypatch.setattr(device, "cuda_sm_count", lambda: 132)
    monkeypatch.setattr(WS, "tma_ready", lambda *_a: True)
    monkeypatch.delenv("KSEARCH_WGMMA_CONFIG", raising=False)
    _, ws = configs(p)
    kinds = variant_configs(ws, p)
    seen = set()
    for b, hkv, length, causal in itertools.product((1, 2, 4), (8, 32), (2048, 4096, 8192), (False, True)):
        q = mx.zeros((b, 32, length, 128), dtype=mx.float16)
        k = mx.zeros((b, hkv, length, 128), dtype=mx.float16)
        # the library's own shape rules, each where the rendering has its knob
        want = ("kt" if tail and GRID.tail_splits(q.shape, k.shape, causal, ws) else
                "hs" if sections and GRID.sections_reorder(q.shape, k.shape, ws) else "plain")
        which, items, grid = ns["_variant"](b, 32, hkv, length, length, causal)
        assert which == want, (b, hkv, length, causal)
        if sections and tail:  # both knobs: the dispatch's own kernel at D=128
            assert kinds[which] == A.wgmma_config(q, k, causal), (b, hkv, length, causal)
        assert (items, grid) == (-(-length // 192) * b * 32, min(132, -(-length // 192) * b * 32))
        seen.add(which)
    assert seen == set(kinds)  # the benchmark's shapes reach every kernel the rendering carries


@pytest.mark.parametrize("constants", [False, True])
def test_a_split_call_gets_fresh_counters_and_records_sized_as_the_library_sizes_them(
        constants: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    p = {**FLASH_WGMMA.default(), "constants": constants}
    ns, made, calls = _candidate(p, monkeypatch)
    q = mx.zeros((1, 32, 4096, 128), dtype=mx.float16)  # 704 items on 132 blocks: 44 left, three parts each
    k = mx.zeros((1, 8, 4096, 128), dtype=mx.float16)
    ns["run"](q, k, k, False)
    ns["run"](q, k, k, False)
    (_, first), (_, second) = calls
    counts = first["inputs"][5]
    assert counts.dtype == mx.uint32 and counts.shape == (KT.counter_count(704, 132, 3),)
    assert not counts.any().item() and counts is not second["inputs"][5]  # zeroed, a new array each call
    assert first["output_shapes"][2] == (KT.scratch_floats(704, 132, 64, False, 3, 128),)
    assert first["output_dtypes"] == [mx.float16, mx.uint64, mx.float32] and first["grid"] == (132 * 512, 1, 1)
    kern = next(m for m in made if m["name"].startswith("flash_wgmma_kt"))
    assert kern["source"] == WS.source_text(A.WIDE_SPLIT_TAIL)  # the library's `_kt` kernel, text for text
    assert kern["input_names"][-1] == "counts" and kern["output_names"][-1] == "part"
    if constants:  # its template constants in its header, as the library writes them
        want = [("T", mx.float16), ("D", 128), ("WG", 3), ("BN", 64), ("CAUSAL", False),
                *WS.stage_args(A.WIDE_SPLIT_TAIL)]
        assert kern["header"].endswith(constant_lines(want)) and "template" not in first
    else:
        assert dict(first["template"])["PREG"] == 32


def test_a_call_with_more_kv_heads_than_a_section_takes_the_heads_in_sections(monkeypatch: pytest.MonkeyPatch) -> None:
    ns, made, calls = _candidate(FLASH_WGMMA.default(), monkeypatch)
    q = mx.zeros((4, 32, 2048, 128), dtype=mx.float16)  # B 4, Hkv 32: 128 K / V heads, sections of 33
    k = mx.zeros((4, 32, 2048, 128), dtype=mx.float16)
    ns["run"](q, k, k, True)
    kern = next(m for m in made if m["name"] == calls[0][0])
    assert kern["source"] == WS.source_text(A.WIDE_SECTIONS) and kern["input_names"][-1] == "tmap"
    assert len(calls[0][1]["inputs"]) == 5 and calls[0][1]["output_shapes"][1] == (132 * 32 + 16,)
