"""K / V through tensor copies (TMA) in the wgmma prefill: the maps' geometry puts every element where the kernel's
wgmma descriptors read it, bad geometry and a missing driver are refused in one line, the configuration names parse,
and the kernel compiles for sm_90a without spills. Correctness and speed on the GPU:
benchmarks/attention_wgmma_check.py."""

from __future__ import annotations

import functools
import itertools
import re

import pytest
from full import spread

from ksearch.backends.nvcc import compile_check, nvcc_path, wrap
from ksearch.errors import BackendUnavailable
from ksearch.kernels import tensor_map
from ksearch.kernels.attention import wgmma as W
from ksearch.kernels.attention import wgmma_ws as WS
from ksearch.kernels.cuda_headers import WGMMA_HEADER


def _box(dims: tuple[int, ...], strides: tuple[int, ...], box: tuple[int, ...],
         coords: tuple[int, ...]) -> dict[int, int]:
    """What one tile copy does, as the PTX manual describes it: the box is traversed innermost dimension first and
    written to shared memory in that order; returns {shared element offset: global byte offset}."""
    byte_strides = (2, *strides)
    out = {}
    for n, idx in enumerate(itertools.product(*(range(b) for b in reversed(box)))):
        idx = idx[::-1]  # innermost first
        assert all(0 <= c + i < d for c, i, d in zip(coords, idx, dims, strict=True))
        out[n] = sum((c + i) * s for c, i, s in zip(coords, idx, byte_strides, strict=True))
    return out


# Cached: the address models below ask for the tables once per element (8192 a tile), and parsing SETUP each time took
# most of the tensor-copy test's 5-17 s a case; SETUP is a constant of the kernel module, so the tables per (D, BN) are.
@functools.cache
def _layouts(d: int, bn: int) -> dict[str, list[int]]:
    """SETUP's per-layout tables (KL, KS, VL, VS, VSTEP: bytes), parsed from its source and evaluated at D, BN."""
    out = {}
    for name, body in re.findall(r"(KL|KS|VL|VS|VSTEP)\[3\] = \{([^}]*)\}", W.SETUP):
        out[name] = [eval(x, {}, {"D": d, "BN": bn}) for x in body.split(",")]  # noqa: S307 - the kernel's constants
    assert sorted(out) == ["KL", "KS", "VL", "VS", "VSTEP"]
    return out


def _k_off(layout: int, kc: int, bn: int) -> int:
    """SETUP's k_off: K's start for its 16 columns kc, in descriptor units (16 bytes)."""
    assert "(kc >> 2) * (BN * 8) + (kc & 3) * 2 : (KV_LAYOUT == 1 ? 2 * BN : 16) * kc" in W.STEPS
    return (kc >> 2) * (bn * 8) + (kc & 3) * 2 if layout == 2 else (2 * bn if layout == 1 else 16) * kc


def k_address(layout: int, r: int, c: int, d: int, bn: int) -> int:
    """Where the wgmma of K's columns c // 16 reads K[r, c] (K-major: keys are N, the head dim is K), before any
    swizzle: the instruction's start plus the canonical layout of its descriptor's type (the PTX manual's matrix
    descriptor: no swizzle, core matrices of 8 rows x 16 bytes, LBO along K and SBO along N; 128-byte swizzle, rows of
    128 bytes, SBO between groups of 8 rows)."""
    t = _layouts(d, bn)
    start = _k_off(layout, c // 16, bn) * 16
    cc = c % 16
    if layout == 2:
        return start + (r // 8) * t["KS"][2] + (r % 8) * 128 + (cc // 8) * 16 + (cc % 8) * 2
    return start + (r // 8) * t["KS"][layout] + (cc // 8) * t["KL"][layout] + (r % 8) * 16 + (cc % 8) * 2


def v_address(layout: int, r: int, c: int, d: int, bn: int) -> int:
    """The same for V[r, c] read MN-major by O += P V (keys are K, the head dim is N): no swizzle, core matrices of 8
    keys x 16 bytes, LBO along K and SBO along N; 128-byte swizzle, rows of 64 elements, LBO between them along N, SBO
    between groups of 8 keys."""
    t = _layouts(d, bn)
    start = (r // 16) * t["VSTEP"][layout]
    rr = r % 16
    if layout == 2:
        return start + (c // 64) * t["VL"][2] + (c % 64) * 2 + (rr % 8) * 128 + (rr // 8) * t["VS"][2]
    return start + (rr // 8) * t["VL"][layout] + (c // 8) * t["VS"][layout] + (rr % 8) * 16 + (c % 8) * 2


@pytest.mark.parametrize(("mode", "d", "bn"), [(1, 128, 64), (2, 128, 64), (1, 64, 128), (2, 64, 64), (3, 128, 64),
                                               (3, 64, 128)])
def test_tensor_copies_put_every_element_where_the_descriptors_read_it(mode: int, d: int, bn: int) -> None:
    b, h, s, t, bh = 2, 3, 4 * bn, 2, 4
    dims, strides, box = WS.tma_geometry((b, h, s, d), bn, mode)
    cols = 64 if mode == 3 else 8  # the kernel's coordinates and shared offsets (elements) per copy
    copies = ([((0, t * bn, 0, bh), 0)] if mode == 1 else
              [((c * cols, t * bn, bh), c * bn * cols) for c in range(d // cols)])
    smem: dict[int, int] = {}
    for coords, base in copies:
        for off, g in _box(dims, strides, box, coords).items():
            assert base + off not in smem
            smem[base + off] = g  # before the swizzle, which the copy and the wgmma apply alike (1024-byte aligned)
    assert sorted(smem) == list(range(bn * d))  # the tile fills its stage exactly
    layout = 2 if mode == 3 else 1
    for r, c in itertools.product(range(bn), range(d)):
        g = ((bh * s) + t * bn + r) * d * 2 + c * 2  # K[b, h][t * bn + r, c], contiguous (B, H, S, D)
        assert smem[k_address(layout, r, c, d, bn) // 2] == g
        assert smem[v_address(layout, r, c, d, bn) // 2] == g
        # the same model reads the tile images' core-matrix order (layout 0, the kernels checked on the H200)
        core = ((r >> 3) * (d >> 3) + (c >> 3)) * 64 + (r & 7) * 8 + (c & 7)
        assert k_address(0, r, c, d, bn) // 2 == core and v_address(0, r, c, d, bn) // 2 == core
    assert WS.tma_swizzle(mode) == (3 if mode == 3 else 0)


@pytest.mark.parametrize(("dims", "strides", "box", "says"), [
    ((8, 64), (24,), (8, 64), "multiples of 16"),
    ((8, 64), (256,), (4, 64), "whole 16 bytes"),
    ((8, 512), (256,), (8, 512), "1..256"),
    ((8, 64, 2), (256,), (8, 64, 1), "one stride fewer"),
    ((0, 64), (256,), (8, 64), "1..2^32"),
    ((128, 64), (256,), (128, 64), "at most 128 bytes"),
])
def test_a_bad_tensor_map_geometry_is_refused_before_the_driver(dims: tuple[int, ...], strides: tuple[int, ...],
                                                                 box: tuple[int, ...], says: str) -> None:
    with pytest.raises(ValueError, match=re.escape(says)):
        tensor_map.encode(dims, strides, box, swizzle=3 if says == "at most 128 bytes" else 0)


def test_every_geometry_the_kernel_asks_for_is_within_the_limits() -> None:
    for mode, d, bn, s in itertools.product((1, 2, 3), (64, 128), (64, 128), (128, 8192)):
        dims, strides, box = WS.tma_geometry((4, 8, s, d), bn, mode)
        tensor_map.check_geometry(dims, strides, box, 2, WS.tma_swizzle(mode))
        assert box[0] * 2 == (128 if mode == 3 else 16) and len(dims) == (4 if mode == 1 else 3)


def test_without_the_driver_a_tensor_map_says_so_in_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    def no_driver(name: str) -> None:
        raise OSError(f"{name}: cannot open shared object file")

    tensor_map._encode_fn.cache_clear()
    monkeypatch.setattr(tensor_map.ctypes, "CDLL", no_driver)
    with pytest.raises(BackendUnavailable, match="libcuda.so.1") as err:
        tensor_map.encode((8, 64), (256,), (8, 64))
    assert "\n" not in str(err.value)
    tensor_map._encode_fn.cache_clear()


def test_a_refused_map_names_its_geometry(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(tensor_map, "_encode_fn", lambda: (lambda *args: 1))  # CUDA_ERROR_INVALID_VALUE
    with pytest.raises(BackendUnavailable, match=r"dims \[8, 64\].*CUresult 1"):
        tensor_map.encode((8, 64), (256,), (8, 64))


def test_tma_configuration_names_parse_round_trip_and_refuse_what_cannot_run() -> None:
    assert WS.parse_config("ws3_n64_s4_p4_tma") == WS.WsConfig(3, 64, 4, 4, tma=1)
    assert WS.parse_config("ws3_n64_s4_p4_tmac") == WS.WsConfig(3, 64, 4, 4, tma=2)
    assert WS.parse_config("ws3_n64_s4_p4_tmas") == WS.WsConfig(3, 64, 4, 4, tma=3)
    for name in ("ws3_n64_s4_p4_tma", "ws2_n128_s3_p4_tmac", "ws3_n64_s4_p4_tma_pp", "ws2_n128_s3_p4_tmas"):
        assert WS.config_name(WS.parse_config(name)) == name
    with pytest.raises(ValueError, match="name one of them"):
        WS.parse_config("ws3_n64_s4_p4_bulk_tma")
    with pytest.raises(ValueError, match="need a producer"):
        WS.parse_config("ws3_n64_s4_p0_tma")
    assert WS.WsConfig(3, 64, 4, 4, tma=1).smem_bytes(128) <= W.MAX_SMEM
    assert WS.stage_args(WS.WsConfig(3, 64, 4, 4, tma=2))[-6:] == [("PP", False), ("PREG", 24), ("CREG", 160),
                                                                  ("TMA", 2), ("QPF", False), ("MAPS1", False)]
    assert ("BULK", True) in WS.stage_args(WS.WsConfig(3, 64, 4, 4, tma=1))  # barriers count bytes, as bulk copies


def tma_units(combos: list[tuple[str, int, int, int, bool, int, int]]) -> list[str]:
    """Translation units of the tensor-copy kernel as MLX would generate them (inputs tmap, outputs maps)."""
    units = []
    for i, (dt, d, wg, bn, causal, stages, mode) in enumerate(combos):
        cfg = WS.WsConfig(wg, bn, stages, 4, tma=mode)
        units.append(wrap(f"tm{i}", WS.SOURCE_TMA, W.launch_bounds(128 * wg + 128),
                          [("q", "T"), ("k", "T"), ("v", "T"), ("scale", "float32"), ("tmap", "uint64")],
                          [("o", "T"), ("maps", "uint64")],
                          [("T", dt), ("D", d), ("WG", wg), ("BN", bn), ("CAUSAL", causal), *WS.stage_args(cfg)]))
    return units


@pytest.mark.slow
@pytest.mark.skipif(nvcc_path() is None, reason="nvcc not installed")
def test_tma_kernel_compiles_for_sm90a_without_spills() -> None:
    # `make test` compiles one of each copy mode (the first, middle and last); KSEARCH_TEST_FULL=1 all six
    combos = spread([("float16", 128, 3, 64, True, 4, 1), ("float16", 128, 2, 128, False, 3, 1),
                     ("float16", 128, 3, 64, False, 4, 2), ("bfloat16", 64, 3, 64, True, 4, 2),
                     ("bfloat16", 64, 2, 128, False, 3, 3), ("float16", 128, 3, 64, True, 4, 3)], 3)
    ok, log = compile_check([WGMMA_HEADER, tensor_map.TMA_HEADER, *tma_units(combos)])
    assert ok, log[-3000:]
    assert "C751" not in log, "wgmma serialised"  # C7510-C7515: every wgmma of the kernel serialised
    # ptxas reports kernels in its own order: match them by name. Three causal consumer warpgroups may spill two
    # registers (8 bytes with the 16-byte epilogue, 4 with the 4-byte one; benchmarks/prefill_sass.py)
    spills = {int(m[1]): int(m[2]) for m in re.finditer(
        r"custom_kernel_tm(\d+)E[^']*'[^\n]*\n[^\n]*\n\s*\d+ bytes stack frame, (\d+) bytes spill stores", log)}
    assert sorted(spills) == list(range(len(combos))), log[-3000:]
    for i, (_dt, _d, wg, _bn, causal, _st, _mode) in enumerate(combos):
        assert spills[i] <= (8 if wg == 3 and causal else 0), (combos[i], spills[i])


@pytest.mark.slow
@pytest.mark.skipif(nvcc_path() is None, reason="nvcc not installed")
def test_one_consumer_warpgroup_fits_two_blocks_an_sm() -> None:
    # ws1_n64_s2_p1_tmas_b2: one consumer warpgroup and a producer warp under launch bounds for two blocks an SM
    # (65536 / 320 = 204 registers a thread), causal at D=128 (the most registers): no spills, no serialised wgmma
    cfg = WS.parse_config("ws1_n64_s2_p1_tmas_b2")
    assert (cfg.threads(), cfg.blocks) == (160, 2)
    units = [wrap(f"b2_{d}", WS.SOURCE_TMA, W.launch_bounds(cfg.threads(), cfg.blocks),
                  [("q", "T"), ("k", "T"), ("v", "T"), ("scale", "float32"), ("tmap", "uint64")],
                  [("o", "T"), ("maps", "uint64")],
                  [("T", "float16"), ("D", d), ("WG", 1), ("BN", 64), ("CAUSAL", True), *WS.stage_args(cfg)])
             for d in (64, 128)]
    ok, log = compile_check([WGMMA_HEADER, tensor_map.TMA_HEADER, *units])
    assert ok, log[-3000:]
    assert "C751" not in log, "wgmma serialised"  # C7510-C7515: every wgmma of the kernel serialised
    found = re.findall(r"custom_kernel_b2_(\d+)E[^']*'[^\n]*\n[^\n]*\n\s*\d+ bytes stack frame, (\d+) bytes spill stores"
                       r"[^\n]*\n[^\n]*Used (\d+) registers", log)
    assert len(found) == 2, log[-3000:]
    for _d, spill, regs in found:
        assert int(spill) == 0 and int(regs) <= 204, (found, log[-1500:])


def test_blocks_an_sm_are_named_checked_and_bounded() -> None:
    assert WS.config_name(WS.parse_config("ws1_n64_s2_p1_tmas_b2")) == "ws1_n64_s2_p1_tmas_b2"
    assert WS.parse_config("ws3_n64_s4_p4_tmas").blocks == 1  # no suffix: one block an SM
    with pytest.raises(ValueError, match="registers a thread"):  # 2 x 288 threads leave 113 registers each
        WS.parse_config("ws2_n64_s2_p1_tmas_b2")
    with pytest.raises(ValueError, match="1 to 4 blocks"):
        WS.parse_config("ws1_n64_s2_p1_tmas_b5")
    assert "launch_bounds(160, 2)" in W.launch_bounds(160, 2)
