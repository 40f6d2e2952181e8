"""The flash_wgmma family's `constants`: a rendering makes each kernel at a (dtype, D, mask)'s first call with its
template arguments written into its header as the library writes them (MLX formats template arguments into every
call), calls it without `template=`, and keeps 1 / sqrt(D) as one array a head dim, as the library's prefill does."""

from __future__ import annotations

import random
from typing import Any

import pytest
from recorded_kernels import Calls, Made, record_kernels

from ksearch.backends.nvcc import compile_check, nvcc_path, wrap
from ksearch.kernels.attention import mma_sync
from ksearch.kernels.attention import wgmma as W
from ksearch.kernels.attention import wgmma_ws as WS
from ksearch.kernels.attention import wgmma_ws_images as WI
from ksearch.kernels.kernel_text import constant_lines
from ksearch.policy.templates.attention_wgmma import FLASH_WGMMA, configs

mx = pytest.importorskip("mlx.core")


def _candidate(params: dict[str, Any], monkeypatch: pytest.MonkeyPatch, hopper: bool = True,
               ) -> tuple[dict[str, Any], Made, Calls]:
    """The rendered candidate's module with MLX's kernel constructor recording what is made and called (MLX on the
    CPU has no CUDA kernels: each call hands back zeros)."""
    made, calls = record_kernels(monkeypatch)
    namespace: dict[str, Any] = {}
    exec(compile(FLASH_WGMMA.source(params), "candidate", "exec"), namespace)  # noqa: S102 - our own rendering
    namespace["_HOPPER"] = hopper
    made.clear()  # the float32 fallback's row kernel, made when the module loads
    if params.get("persist"):  # no driver here to count the SMs
        namespace["cuda_sm_count"] = lambda: 132
    if params.get("tma"):  # nor to encode a tensor map
        namespace["_tmap"] = lambda _shape, _bn: mx.zeros((16,), dtype=mx.uint64)
    return namespace, made, calls


def _qkv(length: int, d: int, dtype: Any = None) -> tuple[Any, Any, Any]:
    q = mx.zeros((1, 8, length, d), dtype=dtype or mx.float16)
    k = mx.zeros((1, 2, length, d), dtype=dtype or mx.float16)
    return q, k, k


def test_off_by_default_and_every_library_knob_renders_with_it() -> None:
    assert FLASH_WGMMA.default()["constants"] is False
    both = [p for p in FLASH_WGMMA.all_params() if FLASH_WGMMA.valid(p)]
    assert {p["constants"] for p in both} == {False, True}
    assert sum(p["constants"] for p in both) == len(both) // 2  # every valid configuration has both renderings


ONE_BLOCK_AN_ITEM = {"persist": False, "sections": False, "tail": False}  # `_hs` and `_kt` are persistent kernels'


@pytest.mark.parametrize("params", [{}, ONE_BLOCK_AN_ITEM, {"wg": 2, "bn": 128, "stages": 3, "crescale": False, "row_sums_once": False, "exp_ahead": False,
                                                            "tail": False},
                                    {"tma": False, "bulk": True, **ONE_BLOCK_AN_ITEM},
                                    {"producer": False, "tma": False, "crescale": False, "row_sums_once": False, "exp_ahead": False, "stages": 2,
                                     **ONE_BLOCK_AN_ITEM}],
                         ids=["persistent", "tma", "persistent-tall", "bulk", "synchronous"])
def test_each_kernel_is_made_once_a_set_with_the_librarys_constants(params: dict[str, Any],
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    p = {**FLASH_WGMMA.default(), **params, "constants": True}
    assert FLASH_WGMMA.valid(p), p
    ns, made, calls = _candidate(p, monkeypatch)
    assert made == []  # no tensor-core kernel made before the first call
    cfg, ws = configs(p)
    for _ in range(3):
        ns["run"](*_qkv(256, 128), True)
    ns["run"](*_qkv(512, 128), True)  # another length: the same kernel
    images = 1 if p["bulk"] else 0
    assert len(made) == 1 + images and len(calls) == 4 * (1 + images)
    assert all("template" not in kw for _, kw in calls)
    kern = next(m for m in made if "tile_image" not in m["name"])
    # the library's own template list for this configuration, as it writes it (kernel_text.constant_lines)
    stage = WS.stage_args(ws) if p["producer"] else []
    want = [("T", mx.float16), ("D", 128), ("WG", cfg.wg), ("BN", cfg.bn), ("CAUSAL", True), *stage]
    assert kern["header"].endswith(constant_lines(want))
    assert kern["source"] == (WS.source_text(ws) if p["producer"] else W.source(cfg.stages))
    assert kern["shared_memory"] == (ws.smem_bytes(128) if p["producer"] else cfg.smem_bytes(128))
    assert kern["ensure_row_contiguous"] is True
    # 1 / sqrt(D) is one array a head dim, not a new one a call
    attn = [kw for name, kw in calls if "tile_image" not in name]
    assert all(kw["inputs"][3] is attn[0]["inputs"][3] for kw in attn)
    ns["run"](*_qkv(256, 128), False)  # the mask, another dtype, another head dim: kernels of their own
    ns["run"](*_qkv(256, 128, mx.bfloat16), True)
    ns["run"](*_qkv(256, 64), True)
    attn_made = [m for m in made if "tile_image" not in m["name"]]
    assert len(attn_made) == 4 and len({m["name"] for m in made}) == len(made)
    assert "constexpr bool CAUSAL = false;" in attn_made[1]["header"]
    assert "using T = __nv_bfloat16;" in attn_made[2]["header"] and "constexpr int D = 64;" in attn_made[3]["header"]
    assert attn[0]["inputs"][3] is not calls[-1][1]["inputs"][3]  # D 64's scale


def test_bulk_copies_make_the_image_kernel_once_a_head_dim(monkeypatch: pytest.MonkeyPatch) -> None:
    p = {**FLASH_WGMMA.default(), "tma": False, "bulk": True, **ONE_BLOCK_AN_ITEM, "constants": True}
    ns, made, calls = _candidate(p, monkeypatch)
    for _ in range(2):
        ns["run"](*_qkv(256, 128), True)
    image = next(m for m in made if "tile_image" in m["name"])
    assert image["header"].endswith(constant_lines([("D", 128)])) and image["source"] == WI.IMAGE_SOURCE
    assert [kw["grid"] for name, kw in calls if "tile_image" in name] == [(2 * 256 * 128 // 8, 1, 1)] * 2


def test_off_hopper_the_mma_sync_kernel_carries_the_librarys_constants(monkeypatch: pytest.MonkeyPatch) -> None:
    ns, made, calls = _candidate({**FLASH_WGMMA.default(), "constants": True}, monkeypatch, hopper=False)
    ns["run"](*_qkv(256, 64), True)
    ns["run"](*_qkv(256, 64), True)
    cfg = mma_sync.PrefillConfig(128, 64, True)
    want = [("T", mx.float16), ("D", 64), ("BM", 128), ("BN", 64), ("CAUSAL", True), ("DB", True)]
    assert len(made) == 1 and made[0]["header"].endswith(constant_lines(want))
    assert made[0]["source"] == mma_sync.SOURCE and made[0]["shared_memory"] == cfg.smem_bytes(64)
    assert [kw["grid"] for _, kw in calls] == [(2 * 256, 8, 1)] * 2 and "template" not in calls[0][1]


def test_the_search_can_reach_it_by_mutation() -> None:
    p = FLASH_WGMMA.default()
    rng = random.Random(0)
    assert any(FLASH_WGMMA.mutate(p, rng)["constants"] for _ in range(200))


@pytest.mark.slow
@pytest.mark.skipif(nvcc_path() is None, reason="nvcc not installed")
@pytest.mark.parametrize("params,hopper", [({}, True), ({"tma": False, "bulk": True, **ONE_BLOCK_AN_ITEM}, True),
                                           ({}, False)],
                         ids=["tma", "bulk", "mma_sync"])
def test_the_kernels_made_compile_as_mlx_builds_them(params: dict[str, Any], hopper: bool,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """Each kernel as the rendering makes it, the header it builds at run time carrying the constants and no template
    arguments, wrapped as MLX wraps a custom kernel and compiled (one translation unit each: two kernels' constants in
    MLX's namespace would clash)."""
    ns, made, _calls = _candidate({**FLASH_WGMMA.default(), **params, "constants": True}, monkeypatch, hopper=hopper)
    ns["run"](*_qkv(256, 128, mx.bfloat16), True)
    assert made
    types = {"scale": "float32", "tmap": "uint64", "maps": "uint64"}
    for kern in made:
        unit = wrap(kern["name"], kern["source"], kern["header"],
                    [(n, types.get(n, "T")) for n in kern["input_names"]],
                    [(n, types.get(n, "T")) for n in kern["output_names"]], dtype="bfloat16")
        ok, log = compile_check([unit], arch="sm_90a" if hopper else "sm_80")
        assert ok, log[-3000:]
