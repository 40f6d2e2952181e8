"""K / V through tensor copies (TMA) in the wgmma prefill: the maps' geometry puts every element where the kernel's
wgmma descriptors read it, bad geometry and a missing driver are refused in one line, the configuration names parse,
and the kernel compiles for sm_90a without spills. Correctness and speed on the GPU:
benchmarks/attention_wgmma_check.py."""

from __future__ import annotations

import itertools
import re

import pytest

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


def _descriptor_constants(kv_cm: bool, d: int, bn: int) -> dict[str, int]:
    """k_lead, k_stride, v_lead, v_stride, k_step, v_step as SETUP computes them (parsed from its source)."""
    consts = {"KV_CM": kv_cm, "D": d, "BN": bn}
    for line in re.findall(r"constexpr int (qk_lead.*|k_lead.*|v_lead.*|k_step.*);", W.SETUP):
        for name, expr in re.findall(r"(\w+) = ([^,]+(?:\?[^,:]+:[^,]+)?)", line):
            py = re.sub(r"(.+?) \? (.+?) : (.+)", r"(\2) if (\1) else (\3)", expr)
            consts[name] = eval(py, {}, dict(consts))  # noqa: S307 - the kernel's own constant expressions
    return consts


@pytest.mark.parametrize(("mode", "d", "bn"), [(1, 128, 64), (2, 128, 64), (1, 64, 128), (2, 64, 64)])
def test_tensor_copies_put_every_element_where_the_descriptors_read_it(mode: int, d: int, bn: int) -> None:
    b, h, s, t, bh = 2, 3, 4 * bn, 2, 4
    dims, strides, box = WS.tma_geometry((b, h, s, d), bn, mode)
    copies = ([((0, t * bn, 0, bh), 0)] if mode == 1 else  # the kernel's coordinates and shared offsets (elements)
              [((c * 8, t * bn, bh), c * bn * 8) for c in range(d // 8)])
    smem: dict[int, int] = {}
    for coords, base in copies:
        for off, g in _box(dims, strides, box, coords).items():
            assert base + off not in smem
            smem[base + off] = g
    assert sorted(smem) == list(range(bn * d))  # the tile fills its stage exactly
    cm = _descriptor_constants(True, d, bn)
    core = _descriptor_constants(False, d, bn)
    for r, c in itertools.product(range(bn), range(d)):
        g = ((bh * s) + t * bn + r) * d * 2 + c * 2  # K[b, h][t * bn + r, c], contiguous (B, H, S, D)
        # K is read K-major (keys are the N rows, the head dim is K), V MN-major (keys are K): core matrix
        # (rows / 8, cols / 8) at lead x (K index) + stride x (N index), 16 bytes a row inside it.
        k_at = (r // 8) * cm["k_stride"] + (c // 8) * cm["k_lead"] + (r % 8) * 16 + (c % 8) * 2
        v_at = (r // 8) * cm["v_lead"] + (c // 8) * cm["v_stride"] + (r % 8) * 16 + (c % 8) * 2
        assert smem[k_at // 2] == g and smem[v_at // 2] == g
        # the same model reads the tile images' core-matrix order with the constants of the other kernels
        core_at = (r // 8) * core["k_stride"] + (c // 8) * core["k_lead"] + (r % 8) * 16 + (c % 8) * 2
        assert core_at // 2 == ((r >> 3) * (d >> 3) + (c >> 3)) * 64 + (r & 7) * 8 + (c & 7)
    # one wgmma k-step is 16 columns of K (two 16-byte columns) and 16 keys of V (two core-matrix rows)
    assert cm["k_step"] * 16 == 2 * cm["k_lead"] and cm["v_step"] * 16 == 2 * cm["v_lead"]
    assert core["k_step"] * 16 == 2 * core["k_lead"] and core["v_step"] * 16 == 2 * core["v_lead"]


@pytest.mark.parametrize(("dims", "strides", "box", "says"), [
    ((8, 64), (24,), (8, 64), "multiples of 16"),
    ((8, 64), (256,), (4, 64), "whole 16 bytes"),
    ((8, 512), (256,), (8, 512), "1..256"),
    ((8, 64, 2), (256,), (8, 64, 1), "one stride fewer"),
    ((0, 64), (256,), (8, 64), "1..2^32"),
])
def test_a_bad_tensor_map_geometry_is_refused_before_the_driver(dims: tuple[int, ...], strides: tuple[int, ...],
                                                                 box: tuple[int, ...], says: str) -> None:
    with pytest.raises(ValueError, match=re.escape(says)):
        tensor_map.encode(dims, strides, box)


def test_every_geometry_the_kernel_asks_for_is_within_the_limits() -> None:
    for mode, d, bn, s in itertools.product((1, 2), (64, 128), (64, 128), (128, 8192)):
        dims, strides, box = WS.tma_geometry((4, 8, s, d), bn, mode)
        tensor_map.check_geometry(dims, strides, box, 2)
        assert box[0] * 2 == 16 and len(dims) == (4 if mode == 1 else 3)


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
    for name in ("ws3_n64_s4_p4_tma", "ws2_n128_s3_p4_tmac", "ws3_n64_s4_p4_tma_pp"):
        assert WS.config_name(WS.parse_config(name)) == name
    with pytest.raises(ValueError, match="name one of them"):
        WS.parse_config("ws3_n64_s4_p4_bulk_tma")
    with pytest.raises(ValueError, match="need a producer"):
        WS.parse_config("ws3_n64_s4_p0_tma")
    assert WS.WsConfig(3, 64, 4, 4, tma=1).smem_bytes(128) <= W.MAX_SMEM
    assert WS.stage_args(WS.WsConfig(3, 64, 4, 4, tma=2))[-2:] == [("PP", False), ("TMA", 2)]
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
    combos = [("float16", 128, 3, 64, True, 4, 1), ("float16", 128, 3, 64, False, 4, 2),
              ("bfloat16", 64, 3, 64, True, 4, 2), ("float16", 128, 2, 128, False, 3, 1)]
    ok, log = compile_check([WGMMA_HEADER, tensor_map.TMA_HEADER, *tma_units(combos)])
    assert ok, log[-3000:]
    assert "C7513" not in log and "C7514" not in log, "wgmma serialised"
    spills = [int(n) for n in re.findall(r"(\d+) bytes spill stores", log)]
    assert len(spills) == len(combos) and not any(spills), log[-3000:]
