"""The CUDA prefill kernels other than the tensor-copy ones (the synchronous wgmma kernel, the producer kernel on tile
images or with cp.async, mma.sync for GPUs that are not Hopper, the tile-image kernel): each launch is made once per
shape with the kernel's template arguments written into its text as constants (MLX formats template arguments into
the kernel's name and text on every call), and the text so made compiles as MLX wraps it."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from recorded_kernels import Calls, Made, record_kernels

from ksearch.backends.nvcc import compile_check, nvcc_path, wrap
from ksearch.kernels.attention import cuda_prefill, mma_sync
from ksearch.kernels.attention import wgmma as W
from ksearch.kernels.attention import wgmma_ws as WS
from ksearch.kernels.attention import wgmma_ws_images as WI
from ksearch.kernels.kernel_text import constant_lines

mx = pytest.importorskip("mlx.core")
A = importlib.import_module("ksearch.kernels.attention")

Recorded = tuple[Made, Calls]


@pytest.fixture
def recorded(monkeypatch: pytest.MonkeyPatch) -> Iterator[Recorded]:
    """(kernels made, their calls): MLX on the CPU has no CUDA kernels, so each made kernel hands back zeros."""
    caches = (cuda_prefill.build_kernel, W._launch, WS._launch, WI._image_launch, WI._image_kernel, mma_sync._launch)
    for c in caches:
        c.cache_clear()
    yield record_kernels(monkeypatch)
    for c in caches:
        c.cache_clear()


BULK = WS.with_bulk_copies(A.WIDE)
CPASYNC = WS.parse_config("ws3_n64_s3_p4")
# (kernel function, configuration, the template arguments it was called with before they became constants)
CASES = [
    (W.attention_wgmma, W.WgmmaConfig(wg=3, bn=64, stages=2), [("WG", 3), ("BN", 64), ("CAUSAL", True)]),
    (WS.attention_wgmma_ws, BULK, [("WG", 3), ("BN", 64), ("CAUSAL", True), *WS.stage_args(BULK)]),
    (WS.attention_wgmma_ws, CPASYNC, [("WG", 3), ("BN", 64), ("CAUSAL", True), *WS.stage_args(CPASYNC)]),
    (mma_sync.attention_cuda, mma_sync.PrefillConfig(128, 64, True),
     [("BM", 128), ("BN", 64), ("CAUSAL", True), ("DB", True)]),
]
IDS = ["wgmma", "bulk", "cp_async", "mma_sync"]


def _qkv(length: int, dtype: Any = None) -> tuple[Any, Any, Any]:
    dt = dtype or mx.float16
    q = mx.zeros((1, 8, length, 128), dtype=dt)
    k = mx.zeros((1, 2, length, 128), dtype=dt)
    return q, k, k


@pytest.mark.parametrize("fn,cfg,template", CASES, ids=IDS)
def test_a_launch_is_made_once_a_shape_with_its_template_arguments_as_constants(
        recorded: Recorded, fn: Callable[..., Any], cfg: Any, template: list[tuple[str, Any]]) -> None:
    made, calls = recorded
    images = 1 if getattr(cfg, "bulk", False) else 0  # the tile-image kernel runs before the bulk-copy kernel
    for _ in range(3):
        fn(*_qkv(256), True, cfg)
    assert len(made) == 1 + images and len(calls) == 3 * (1 + images)
    assert all("template" not in kw for _, kw in calls)
    kern = next(m for m in made if "tile_image" not in m["name"])
    assert kern["header"].endswith(constant_lines([("T", mx.float16), ("D", 128), *template]))
    rows = 64 * cfg.wg if hasattr(cfg, "wg") else cfg.bm
    nt = cfg.threads() if isinstance(cfg, WS.WsConfig) else 128 * cfg.wg if hasattr(cfg, "wg") else cfg.bm // 16 * 32
    assert calls[-1][1]["grid"] == (-(-256 // rows) * nt, 8, 1) and calls[-1][1]["threadgroup"] == (nt, 1, 1)
    # another length: a launch of its own, the same kernel; another dtype: a kernel of its own
    fn(*_qkv(512), True, cfg)
    assert len(made) == 1 + images and calls[-1][1]["grid"] == (-(-512 // rows) * nt, 8, 1)
    fn(*_qkv(256, mx.bfloat16), True, cfg)
    assert len(made) == 2 + images  # the tile-image kernel's text names no dtype: one for both
    assert "using T = __nv_bfloat16;" in made[-1]["header"]


def test_the_tile_images_kernel_takes_d_as_a_constant_and_one_launch_a_shape(recorded: Recorded) -> None:
    made, calls = recorded
    k = mx.zeros((2, 3, 136, 64), dtype=mx.float16)
    for _ in range(2):
        ki, vi = WI.tile_images(k, k)
    assert ki.shape == k.shape and vi.dtype == k.dtype
    assert len(made) == 1 and made[0]["header"].endswith(constant_lines([("D", 64)]))
    assert [kw["grid"] for _, kw in calls] == [(k.size // 8, 1, 1)] * 2 and "template" not in calls[0][1]


@pytest.mark.slow
@pytest.mark.skipif(nvcc_path() is None, reason="nvcc not installed")
@pytest.mark.parametrize("fn,cfg,template", CASES, ids=IDS)
def test_the_kernels_with_constants_compile_as_mlx_builds_them(
        recorded: Recorded, fn: Callable[..., Any], cfg: Any, template: list[tuple[str, Any]]) -> None:
    """Each kernel as made, its header carrying the constants and no template arguments, wrapped as MLX wraps a custom
    kernel and compiled for sm_90a (sm_80 for mma.sync, which runs where wgmma does not)."""
    made, _calls = recorded
    fn(*_qkv(256, mx.bfloat16), True, cfg)
    units = []
    for kern in made:
        io = [(n, "float32" if n == "scale" else "T") for n in kern["input_names"]]
        units.append(wrap(kern["name"], kern["source"], kern["header"], io,
                          [(n, "T") for n in kern["output_names"]], dtype="bfloat16"))
    for unit in units:  # one translation unit each: two kernels' constants in MLX's namespace would clash
        ok, log = compile_check([unit], arch="sm_80" if fn is mma_sync.attention_cuda else "sm_90a")
        assert ok, log[-3000:]
