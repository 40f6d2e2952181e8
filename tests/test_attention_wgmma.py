"""The wgmma prefill kernel (ksearch/kernels/attention/wgmma.py) compiles for sm_90a with nvcc at every
configuration the GPU check tries (an even spread of them in `make test`, all with KSEARCH_TEST_FULL=1: tests/full.py), with no register spills and without ptxas serialising its wgmmas; the dispatcher
takes it on Hopper only (KSEARCH_WGMMA overrides)."""

from __future__ import annotations

import dataclasses
import itertools
import os
import pathlib
import re

import pytest
from full import spread

from ksearch.backends.nvcc import compile_check, nvcc_path, wrap
from ksearch.errors import BackendUnavailable
from ksearch.kernels import device, tensor_map
from ksearch.kernels.attention import mma_sync
from ksearch.kernels.attention import wgmma as W
from ksearch.kernels.attention import wgmma_ws as WS
from ksearch.kernels.attention import wgmma_ws_images as WI
from ksearch.kernels.cuda_headers import WGMMA_HEADER


def _units(combos: list[tuple[str, int, int, int, bool]], stages: int = 2, tag: str = "wg") -> list[str]:
    units = [WGMMA_HEADER]
    for i, (dt, d, wg, bn, causal) in enumerate(combos):
        units.append(wrap(f"{tag}{i}", W.source(stages), W.launch_bounds(128 * wg), [("q", "T"), ("k", "T"), ("v", "T"), ("scale", "float32")],
                          [("o", "T")], [("T", dt), ("D", d), ("WG", wg), ("BN", bn), ("CAUSAL", causal)]))
    return units


def _ws_units(combos: list[tuple[str, int, int, int, bool, int, int, bool]], pp: bool = False,
              tag: str = "ws") -> list[str]:
    return [wrap(f"{tag}{i}", WS.SOURCE if pw else WS.SOURCE_MB, WS.BULK_HEADER + W.launch_bounds(128 * wg + 32 * pw),
                 [("q", "T"), ("k", "T"), ("v", "T"), ("scale", "float32")], [("o", "T")],
                 [("T", dt), ("D", d), ("WG", wg), ("BN", bn), ("CAUSAL", c),
                  *WS.stage_args(WS.WsConfig(wg, bn, st, pw, bulk=bulk, pp=pp))])
            for i, (dt, d, wg, bn, c, st, pw, bulk) in enumerate(combos)]


WS_COMBOS = [("float16", 128, 2, 64, c, 3, 4, False) for c in (False, True)]
WS_COMBOS += [("bfloat16", 64, 2, 64, True, 2, 1, False)]
WS_COMBOS += [("float16", 128, 3, 64, c, 4, 0, False) for c in (False, True)]
WS_COMBOS += [("bfloat16", 64, 3, 64, True, 4, 0, False)]
# A producer warpgroup (setmaxnreg): the Hopper default at D=128 without a mask, and its neighbours
WS_COMBOS += [("float16", 128, 3, 64, c, 3, 4, False) for c in (False, True)]
WS_COMBOS += [("bfloat16", 64, 3, 64, True, 3, 4, False)]
# K / V by bulk copies from tile images
WS_COMBOS += [("float16", 128, 3, 64, c, 3, 4, True) for c in (False, True)] + [("bfloat16", 64, 3, 64, True, 3, 4, True)]
# ... two consumer warpgroups on 128-key tiles (168 registers, no spills at either head dim)
WS_COMBOS += [("float16", 128, 2, 128, c, 3, 4, True) for c in (False, True)] + [("bfloat16", 64, 2, 128, True, 4, 4, True)]
# ... with the consumer warpgroups taking turns (ping-pong)
PP_COMBOS = [("float16", 128, 3, 64, c, 4, 4, True) for c in (False, True)] + [("bfloat16", 64, 2, 64, True, 4, 4, True)]
COMBOS = [("float16", 128, wg, bn, c) for wg, bn, c in itertools.product((1, 2, 3), (64, 128), (False, True))
          if W.fits_registers(W.WgmmaConfig(wg, bn), 128)]
COMBOS += [("bfloat16", 64, 2, 128, True), ("float16", 64, 1, 64, False)]
S3_COMBOS = [("float16", 128, 3, 64, c) for c in (False, True)] + [("bfloat16", 64, 3, 64, True)]  # three stages


@pytest.mark.slow
@pytest.mark.skipif(nvcc_path() is None, reason="nvcc not installed")
def test_wgmma_prefill_compiles_for_sm90a_without_spills() -> None:
    combos, s3, ws, pp = spread(COMBOS, 4), spread(S3_COMBOS, 2), spread(WS_COMBOS, 5), spread(PP_COMBOS, 2)
    ok, log = compile_check(_units(combos) + _units(s3, 3, "wt")[1:] + _ws_units(ws)
                            + _ws_units(pp, pp=True, tag="wp"))
    ok_ca, log_ca = compile_check([W.cp_cache("ca")[0] + WGMMA_HEADER] + _units(COMBOS[:2])[1:])
    assert ok_ca, log_ca[-2000:]  # the L1-allocating cp.async mode compiles too
    assert ok, log[-3000:]
    # C7513 / C7514: ptxas found registers of an in-flight wgmma touched and serialised every wgmma of the kernel
    assert "C751" not in log, "wgmma serialised"  # C7510-C7515: every wgmma of the kernel serialised
    # ptxas reports kernels in its own order: match them by name.
    stats = {m[1]: (int(m[2]), int(m[3])) for m in re.finditer(
        r"custom_kernel_(w[gstp]\d+)E[^']*'[^\n]*\n[^\n]*\n\s*\d+ bytes stack frame, (\d+) bytes spill stores.*?\n"
        r"[^\n]*Used (\d+) registers", log)}
    # (threads a block, spill bytes allowed): the synchronous kernels do not spill; the producer-warpgroup default
    # (3 consumers, 64-key tiles, 3 stages) spills one register when causal (a store and a load an iteration); other
    # opt-in ones a little more.
    budget = {f"wg{i}": (128 * c[2], 0) for i, c in enumerate(combos)}
    budget |= {f"wt{i}": (128 * c[2], 8) for i, c in enumerate(s3)}
    budget |= {f"ws{i}": (128 * wg + 32 * pw, 4 if (wg, bn, st, pw) == (3, 64, 3, 4) else 8)
               for i, (_dt, _d, wg, bn, _c, st, pw, _b) in enumerate(ws)}
    budget |= {f"wp{i}": (128 * wg + 32 * pw, 16) for i, (_dt, _d, wg, _bn, _c, _st, pw, _b) in enumerate(pp)}
    assert stats.keys() == budget.keys(), log[-2000:]
    for name, (spill, regs) in stats.items():
        threads, allowed = budget[name]
        # Registers a thread times threads a block must fit the register file (65536), or the launch fails.
        assert (regs + 7) // 8 * 8 * threads <= 65536, f"{name}: {regs} registers x {threads} threads"
        assert spill <= allowed, f"{name}: {spill} bytes spilled"


def test_launch_bounds_cap_the_registers_ptxas_takes() -> None:
    # The register check above can fail: without the launch bound, ptxas takes more registers than 384 threads have.
    if nvcc_path() is None:
        pytest.skip("nvcc not installed")
    unit = wrap("wg", W.SOURCE, "", [("q", "T"), ("k", "T"), ("v", "T"), ("scale", "float32")], [("o", "T")],
                [("T", "float16"), ("D", 128), ("WG", 3), ("BN", 128), ("CAUSAL", True)])
    ok, log = compile_check([WGMMA_HEADER, unit])
    assert ok, log[-2000:]
    assert int(re.findall(r"Used (\d+) registers", log)[0]) > 170


@pytest.mark.skipif(nvcc_path() is None, reason="nvcc not installed")
def test_a_malformed_wgmma_is_rejected() -> None:
    # The compile check must be able to fail: m64n72 with a 36-register accumulator is not a valid wgmma shape.
    bad = WGMMA_HEADER.replace("m64n64k16", "m64n72k16", 1)
    units = _units([("float16", 64, 1, 64, False)])
    units[0] = bad
    ok, _log = compile_check(units)
    assert not ok


def test_wgmma_configs_fit_shared_memory() -> None:
    assert W.WgmmaConfig().smem_bytes(128) <= W.MAX_SMEM
    assert W.WgmmaConfig(wg=3, bn=64).smem_bytes(128) <= W.MAX_SMEM
    assert WS.WsConfig(2, 64, 3, 4).smem_bytes(128) <= W.MAX_SMEM
    assert WS.WsConfig(2, 128, 4).smem_bytes(128) > W.MAX_SMEM  # the bound can fail


def test_partial_last_block_needs_only_multiples_of_64() -> None:
    mx = pytest.importorskip("mlx.core")
    cfg = W.WgmmaConfig(wg=3, bn=64)
    k = mx.zeros((1, 2, 1024, 128), dtype=mx.float16)
    assert W.supports(mx.zeros((1, 8, 1024, 128), dtype=mx.float16), k, k, True, cfg)  # 1024 = 5 x 192 + 64
    assert not W.supports(mx.zeros((1, 8, 1000, 128), dtype=mx.float16), k, k, False, cfg)
    assert not W.supports(mx.zeros((1, 8, 1024, 96), dtype=mx.float16), k[..., :96], k[..., :96], False, cfg)


@pytest.mark.parametrize("env,is_hopper,expected", [
    (None, True, "ws"), (None, False, "mma_sync"), ("auto", True, "ws"), ("0", True, "mma_sync"),
    ("1", False, "ws")])
def test_wgmma_is_the_default_on_hopper_only(monkeypatch: pytest.MonkeyPatch, env: str | None, is_hopper: bool,
                                             expected: str) -> None:
    import importlib

    mx = pytest.importorskip("mlx.core")
    A = importlib.import_module("ksearch.kernels.attention")

    monkeypatch.setattr(device, "backend", lambda: "cuda")
    monkeypatch.setattr(device, "hopper", lambda: is_hopper)
    monkeypatch.setattr(W, "attention_wgmma", lambda *a: "wgmma")
    monkeypatch.setattr(WS, "attention_wgmma_ws", lambda *a: "ws")
    monkeypatch.setattr(mma_sync, "attention_cuda", lambda *a: "mma_sync")
    monkeypatch.setattr(WS, "tma_ready", lambda *_a: False)  # as without a CUDA driver: bulk copies
    if env is None:
        monkeypatch.delenv("KSEARCH_WGMMA", raising=False)
    else:
        monkeypatch.setenv("KSEARCH_WGMMA", env)
    q = mx.zeros((1, 4, 128, 64), dtype=mx.float16)
    k = mx.zeros((1, 2, 128, 64), dtype=mx.float16)
    assert A.attention(q, k, k, causal=True) == expected
    # the same decision, by name, without running anything
    names = {"ws": "ws2_n128_s3_p4_bulk", "mma_sync": "mma_sync_m128_n64_db"}  # D=64: TALL
    assert A.prefill_plan(q, k, k, causal=True)[0] == names[expected]
    assert A.prefill_plan(q[:, :, :100], k[:, :, :100], k[:, :, :100])[0] == "native"
    # L=100: no kernel of ours takes it; native answers (an array, not a stub's string)
    assert not isinstance(A.attention(q[:, :, :100], k[:, :, :100], k[:, :, :100]), str)
    assert A.attention(q, k, k, config=WS.WsConfig()) == "ws"  # an explicit configuration picks its kernel
    assert A.attention(q, k, k, config=mma_sync.PrefillConfig()) == "mma_sync"
    # An explicit wgmma configuration that does not fit (S=192, not a multiple of 128 keys) answers with native,
    # even where the mma.sync kernel would fit.
    k192 = mx.zeros((1, 2, 192, 64), dtype=mx.float16)
    assert not isinstance(A.attention(q, k192, k192, config=W.WgmmaConfig(2, 128)), str)


def test_hopper_reads_the_compute_capability(monkeypatch: pytest.MonkeyPatch) -> None:
    mx = pytest.importorskip("mlx.core")
    for info, want in (({"compute_capability_major": 9, "architecture": "sm_90"}, True),
                       ({"compute_capability_major": 8, "architecture": "sm_80"}, False), ({}, False)):
        device.hopper.cache_clear()
        monkeypatch.setattr(mx, "device_info", lambda info=info: info)
        assert device.hopper() is want
    device.hopper.cache_clear()


def test_hopper_default_is_the_swizzled_tensor_copy_producer(monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib

    mx = pytest.importorskip("mlx.core")
    A = importlib.import_module("ksearch.kernels.attention")
    monkeypatch.delenv("KSEARCH_WGMMA_CONFIG", raising=False)
    monkeypatch.setattr(WS, "tma_ready", lambda *_a: True)
    q128, q64 = mx.zeros((1, 8, 256, 128), dtype=mx.float16), mx.zeros((1, 8, 256, 64), dtype=mx.float16)
    # ws3_n64_s4_p4_tmas_cr: three consumer warpgroups, O rescaled only when a row's maximum grew past 2^8
    wide = WS.WsConfig(3, 64, 4, 4, tma=3, crescale=True)
    assert wide == A.WIDE  # where neither of the others runs (test_two_warpgroups_on_128_key_tiles_take_d64)
    # at D=128: persistent, each warpgroup only its own tiles (`_wt`), the items in snake order (`_sn`), the index
    # arithmetic on the uniform datapath (`_uw`), P's row sums by one product a tile (`_r1`), P's exponentials ahead
    # of the tile's maximum (`_xa`)
    persistent = dataclasses.replace(wide, persist=True, preg=32, own_tiles=True, snake=True, uniform=True,
                                    row_sums_once=True, exp_ahead=True)
    assert A.wgmma_config(q128, q128, True) == A.wgmma_config(q128, q128, False) == A.WIDE_PERSIST == persistent
    assert WS.config_name(persistent) == "ws3_n64_s4_p4_tmas_pst_preg32_cr_wt_sn_uw_r1_xa"
    assert WS.config_name(wide) == "ws3_n64_s4_p4_tmas_cr"
    assert WS.supports(q128, q128, q128, True, wide) and WS.supports(q64, q64, q64, False, wide)


def test_two_warpgroups_on_128_key_tiles_take_d64(monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib

    mx = pytest.importorskip("mlx.core")
    A = importlib.import_module("ksearch.kernels.attention")
    monkeypatch.delenv("KSEARCH_WGMMA_CONFIG", raising=False)
    monkeypatch.setattr(WS, "tma_ready", lambda *_a: True)

    def qk(length: int, s: int, d: int) -> tuple:
        return mx.zeros((1, 8, length, d), dtype=mx.float16), mx.zeros((1, 2, s, d), dtype=mx.float16)

    tall = WS.WsConfig(2, 128, 3, 4, tma=3, persist=True, snake=True)
    assert A.wgmma_config(*qk(4096, 4096, 64), True) == A.TALL == tall
    assert A.wgmma_config(*qk(2048, 2048, 64), False) == A.TALL  # the best at D=64 in all 12 groups, L 2048 too
    assert A.wgmma_config(*qk(8192, 8192, 128), False) == A.WIDE_PERSIST  # D=128 without the mask too
    assert A.wgmma_config(*qk(4096, 4096, 128), True) == A.WIDE_PERSIST  # D=128 with it, at every length
    assert A.wgmma_config(*qk(2048, 2048, 128), True) == A.WIDE_PERSIST
    assert A.wgmma_config(*qk(4096, 4160, 64), True) == A.WIDE  # S not a multiple of 128 keys
    assert A.wgmma_config(*qk(4096, 4160, 128), True) == A.WIDE_PERSIST
    monkeypatch.setattr(device, "backend", lambda: "cuda")
    monkeypatch.setattr(device, "hopper", lambda: True)
    q, k = qk(4096, 4096, 64)
    assert A.prefill_plan(q, k, k, causal=True)[0] == "ws2_n128_s3_p4_tmas_pst_sn"  # as KSEARCH_WGMMA_CONFIG spells it
    # without a tensor map: bulk copies from tile images, one block an item (persistent blocks need the copies)
    monkeypatch.setattr(WS, "tma_ready", lambda *_a: False)
    assert A.wgmma_config(q, k, True) == WS.WsConfig(2, 128, 3, 4, bulk=True)


def test_without_a_tensor_map_the_default_takes_bulk_copies_from_tile_images(monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib

    mx = pytest.importorskip("mlx.core")
    A = importlib.import_module("ksearch.kernels.attention")
    TM = importlib.import_module("ksearch.kernels.tensor_map")
    monkeypatch.delenv("KSEARCH_WGMMA_CONFIG", raising=False)

    def no_driver() -> None:
        raise BackendUnavailable("tensor maps need the CUDA driver (libcuda.so.1): not here; use a _bulk configuration")

    monkeypatch.setattr(TM, "_encode_fn", no_driver)
    WS.tma_ready.cache_clear()
    try:
        q128, q64 = mx.zeros((1, 8, 256, 128), dtype=mx.float16), mx.zeros((1, 8, 256, 64), dtype=mx.float16)
        assert A.wgmma_config(q128, q128, False) == WS.WsConfig(3, 64, 4, 4, bulk=True, crescale=True)
        assert A.wgmma_config(q64, q64, True) == WS.WsConfig(2, 128, 3, 4, bulk=True)
    finally:
        WS.tma_ready.cache_clear()


def test_configuration_names_parse_and_bad_ones_say_what_to_use() -> None:
    assert WS.parse_config("wg3_n64") == W.WgmmaConfig(3, 64)
    assert WS.parse_config("wg3_n64_s3") == W.WgmmaConfig(3, 64, 3)
    assert WS.parse_config("ws3_n64_s3_p4") == WS.WsConfig(3, 64, 3, 4)
    assert WS.parse_config("ws3_n64_s3_p4_ca") == WS.WsConfig(3, 64, 3, 4, "ca")
    assert WS.parse_config("wg3_n64_ca") == W.WgmmaConfig(3, 64, 2, "ca")
    with pytest.raises(ValueError, match="cg or ca"):
        W.cp_cache("cs")
    assert WS.parse_config("ws3_n64_s4_p0") == WS.WsConfig(3, 64, 4, 0)
    assert WS.parse_config("ws2_n64_s3") == WS.WsConfig(2, 64, 3, 1)
    assert WS.parse_config("ws3_n64_s4_p4_bulk") == WS.WsConfig(3, 64, 4, 4, bulk=True)
    assert WS.parse_config("ws3_n64_s4_p4_bulk_pp") == WS.WsConfig(3, 64, 4, 4, bulk=True, pp=True)
    with pytest.raises(ValueError, match="_bulk"):
        WS.parse_config("ws3_n64_s4_bulk_p4")  # the order is fixed
    # well-formed but able to run at no shape: the error says what to change
    with pytest.raises(ValueError, match="need a producer"):
        WS.parse_config("ws3_n64_s4_p0_bulk")
    with pytest.raises(ValueError, match="4 stages"):
        WS.parse_config("ws3_n64_s3_p0")
    with pytest.raises(ValueError, match="2 or 3 consumer"):
        WS.parse_config("ws1_n64_s3_p4")
    with pytest.raises(ValueError, match="wgW_nN"):
        WS.parse_config("wg3")


def test_configuration_names_round_trip() -> None:
    for name in ("wg3_n64", "wg3_n64_s3", "wg2_n128_ca", "ws3_n64_s4_p4_bulk", "ws3_n64_s4_p4_bulk_pp",
                 "ws3_n64_s3_p4_ca", "ws3_n64_s4_p0", "ws2_n64_s3_p1"):
        assert WS.config_name(WS.parse_config(name)) == name


def test_a_producerless_config_needs_four_stages() -> None:
    mx = pytest.importorskip("mlx.core")
    q = mx.zeros((1, 8, 1024, 128), dtype=mx.float16)
    k = mx.zeros((1, 2, 1024, 128), dtype=mx.float16)
    assert WS.supports(q, k, k, False, WS.WsConfig(3, 64, 4, 0))
    assert not WS.supports(q, k, k, False, WS.WsConfig(3, 64, 3, 0))  # it would wait on its own release
    assert WS.supports(q, k, k, True, WS.WsConfig(3, 64, 3, 4))
    assert not WS.supports(q, k, k, False, WS.WsConfig(1, 64, 3, 4))  # setmaxnreg.inc would lower the count
    assert not WS.supports(q, k, k, False, WS.WsConfig(3, 64, 4, 0, bulk=True))  # bulk copies are the producer's
    assert not WS.supports(q, k, k, False, WS.WsConfig(3, 64, 4, 0, pp=True))  # ping-pong: SOURCE only


def test_env_names_the_wgmma_configuration(monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib

    mx = pytest.importorskip("mlx.core")
    A = importlib.import_module("ksearch.kernels.attention")
    q = mx.zeros((1, 8, 256, 64), dtype=mx.float16)
    monkeypatch.setenv("KSEARCH_WGMMA_CONFIG", "ws3_n64_s4_p0")
    assert A.wgmma_config(q, q, False) == WS.WsConfig(3, 64, 4, 0)
    monkeypatch.setenv("KSEARCH_WGMMA_CONFIG", "wg3_n64_ca")
    assert A.wgmma_config(q, q, False) == W.WgmmaConfig(3, 64, 2, "ca")


@pytest.mark.parametrize(("name", "value", "message"), [
    ("KSEARCH_WGMMA", "nonsense", r"^KSEARCH_WGMMA='nonsense': 0 \(the mma.sync kernel\), 1 \(wgmma\) or auto"),
    ("KSEARCH_WGMMA_CONFIG", "nonsense", r"^KSEARCH_WGMMA_CONFIG='nonsense': 'nonsense' is not a wgmma configuration"),
])
def test_a_bad_setting_is_one_error_naming_it(monkeypatch: pytest.MonkeyPatch, name: str, value: str,
                                               message: str) -> None:
    """An unknown KSEARCH_WGMMA is not read as auto; a bad KSEARCH_WGMMA_CONFIG's error names the setting."""
    import importlib

    mx = pytest.importorskip("mlx.core")
    A = importlib.import_module("ksearch.kernels.attention")
    monkeypatch.setattr(device, "backend", lambda: "cuda")
    monkeypatch.setattr(device, "hopper", lambda: True)
    monkeypatch.setenv(name, value)
    q = mx.zeros((1, 4, 128, 64), dtype=mx.float16)
    with pytest.raises(ValueError, match=message):
        A.attention(q, q[:, :2], q[:, :2])


def test_a_named_warp_specialised_default_is_dispatched(monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib

    mx = pytest.importorskip("mlx.core")
    A = importlib.import_module("ksearch.kernels.attention")
    monkeypatch.setattr(device, "backend", lambda: "cuda")
    monkeypatch.setattr(device, "hopper", lambda: True)
    monkeypatch.setattr(WS, "attention_wgmma_ws", lambda *a: "ws")
    monkeypatch.setenv("KSEARCH_WGMMA_CONFIG", "ws3_n64_s4_p0")
    q = mx.zeros((1, 4, 128, 64), dtype=mx.float16)
    k = mx.zeros((1, 2, 128, 64), dtype=mx.float16)
    assert A.attention(q, k, k) == "ws"


@pytest.mark.parametrize(("name", "value"), [("KSEARCH_WGMMA_CONFIG", "ws3_n64_s3_p4_cb"), ("KSEARCH_WGMMA", "2")])
def test_bench_attention_rejects_a_bad_configuration_name_before_running(tmp_path: pathlib.Path, name: str,
                                                                          value: str) -> None:
    import subprocess
    import sys

    env = {name: value, "PATH": "/usr/bin:/bin", **{k: v for k, v in os.environ.items() if k == "PYTHONPATH"}}
    proc = subprocess.run([sys.executable, "-m", "ksearch.cli", "bench", "attention", "--out", str(tmp_path)],
                          capture_output=True, text=True, timeout=120, env=env)
    assert proc.returncode == 2
    assert name in proc.stderr and "Traceback" not in proc.stderr
    assert list(tmp_path.iterdir()) == []  # nothing ran, nothing written


def test_tile_image_puts_each_tile_in_the_core_matrix_order_the_kernel_reads() -> None:
    # tile_image (MLX ops) is the reference the GPU kernel tile_images is checked against bit for bit
    # (benchmarks/tile_image_check.py); here it is checked against ks_core's formula, element by element.
    mx = pytest.importorskip("mlx.core")
    np = pytest.importorskip("numpy")
    b, h, s, d, bn = 2, 3, 128, 64, 64
    x = np.arange(b * h * s * d, dtype=np.int32).reshape(b, h, s, d)
    img = np.array(WI.tile_image(mx.array(x))).reshape(b, h, s // bn, bn * d)  # tile t: bn * d contiguous elements
    r, c = np.meshgrid(np.arange(bn), np.arange(d), indexing="ij")
    core = ((r >> 3) * (d >> 3) + (c >> 3)) * 64 + (r & 7) * 8 + (c & 7)  # ks_core<D>(r, c) in WGMMA_HEADER
    for t in range(s // bn):
        assert (img[:, :, t][..., core] == x[:, :, t * bn:(t + 1) * bn]).all()
    assert not (img.reshape(x.shape) == x).all()  # it does move elements


@pytest.mark.skipif(nvcc_path() is None, reason="nvcc not installed")
def test_tile_image_kernel_compiles() -> None:
    units = [wrap(f"img{d}", WI.IMAGE_SOURCE, "", [("k", "float16"), ("v", "float16")],
                  [("ki", "float16"), ("vi", "float16")], [("D", d)]) for d in (64, 128)]
    ok, log = compile_check(units)
    assert ok, log[-2000:]


@pytest.mark.parametrize("kind", ["attention", "decode"])
def test_bench_rejects_an_unwritable_out_dir_before_timing(tmp_path: pathlib.Path, kind: str) -> None:
    import subprocess
    import sys

    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    proc = subprocess.run([sys.executable, "-m", "ksearch.cli", "bench", kind, "--out", str(blocker / "sub")],
                          capture_output=True, text=True, timeout=120, env={"PATH": "/usr/bin:/bin"})
    assert proc.returncode == 2
    assert "--out" in proc.stderr and "Traceback" not in proc.stderr
    assert blocker.read_text() == "not a directory"  # nothing overwritten


@pytest.mark.parametrize(("kind", "env", "says"), [("attention", {}, "on the CPU"), ("decode", {}, "on the CPU"),
                                                   ("decode", {"KSEARCH_METAL_KERNELS": "1"}, "NVIDIA GPU")])
def test_bench_refuses_where_the_library_would_time_mlx_against_itself(tmp_path: pathlib.Path, kind: str,
                                                                       env: dict[str, str], says: str) -> None:
    # on the CPU (this machine) attention() and decode() run MLX's attention: minutes of native against native
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, "-m", "ksearch.cli", "bench", kind, "--out", str(tmp_path)],
                          capture_output=True, text=True, timeout=120, env={"PATH": "/usr/bin:/bin", **env})
    assert proc.returncode == 2
    assert says in " ".join(proc.stderr.split()) and "Traceback" not in proc.stderr
    assert proc.stderr.count("\n") == 1 and not list(tmp_path.iterdir())


@pytest.mark.parametrize(("extra", "env", "says"), [(["--kernel", "cluster"], {}, "MLX_USE_CUDA_GRAPHS=0"),
                                                    (["--kernel", "fused"], {}, "library, split_k, mma_split or cluster"),
                                                    (["--config", "warp=8"], {}, "fields: warps, unroll"),
                                                    (["--config", "unroll=two"], {}, "give an integer"),
                                                    (["--config", "unroll=2", "--kernel", "cluster"],
                                                     {"MLX_USE_CUDA_GRAPHS": "0"}, "for the split_k and mma_split kernels")])
def test_bench_decode_refuses_a_kernel_it_cannot_run_in_one_line(tmp_path: pathlib.Path, extra: list[str],
                                                                  env: dict[str, str], says: str) -> None:
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, "-m", "ksearch.cli", "bench", "decode", "--out", str(tmp_path), *extra],
                          capture_output=True, text=True, timeout=120, env={"PATH": "/usr/bin:/bin", **env})
    assert proc.returncode == 2
    assert says in " ".join(proc.stderr.split()) and "Traceback" not in proc.stderr
    assert not list(tmp_path.iterdir())  # refused before any timing or file


def test_the_familys_persistent_renderings_are_the_librarys() -> None:
    # the search reaches the library's persistent defaults as they are, producer registers included: TALL's 24 and
    # WIDE_PERSIST's 32 (three warpgroups with 24 spill)
    import importlib

    from ksearch.policy.templates.attention_wgmma import FLASH_WGMMA, configs

    A = importlib.import_module("ksearch.kernels.attention")
    persistent = {configs(p)[1] for p in FLASH_WGMMA.all_params() if p["persist"] and FLASH_WGMMA.valid(p)}
    assert A.TALL in persistent and A.WIDE_PERSIST in persistent
    assert all(ws.preg == (32 if ws.wg == 3 else 24) for ws in persistent)


@pytest.mark.slow
@pytest.mark.skipif(nvcc_path() is None, reason="nvcc not installed")
@pytest.mark.parametrize("cp", ["cg", "ca"])
def test_every_flash_wgmma_family_configuration_compiles(cp: str) -> None:
    """Every kernel the search can render (the flash_wgmma family's knobs; a spread of them and the library's in make
    test) compiles for sm_90a at D=128, causal (the most registers), fits the register file, and keeps its wgmmas
    unserialised."""
    import importlib

    from ksearch.policy.templates.attention_wgmma import FLASH_WGMMA, configs

    A = importlib.import_module("ksearch.kernels.attention")
    io, out = [("q", "T"), ("k", "T"), ("v", "T"), ("scale", "float32")], [("o", "T")]
    units, threads = [W.cp_cache(cp)[0] + WGMMA_HEADER + WS.BULK_HEADER + tensor_map.TMA_HEADER], {}
    params = [p for p in FLASH_WGMMA.all_params() if p["cp"] == cp]
    # one of each kernel: `sections` and `tail` add the library's `_hs` / `_kt` kernels, compiled where those are
    # tested (test_prefill_key_split_tail.py; the rendering carries their texts: test_attention_family_variants.py)
    kernels = {(configs(p)[1] if p["producer"] else configs(p)[0]): p for p in params}
    # a spread of them, an even spread of the tensor-copy kernels (68 of them with cp.async.cg; every one under
    # KSEARCH_TEST_FULL=1) and every library kernel the family renders
    tma = [k for k, p in kernels.items() if p["producer"] and p["tma"]]
    library = [A.WIDE, A.TALL, A.WIDE_PERSIST, A.WIDE_SECTIONS, A.TALL_SECTIONS, A.WIDE_SPLIT_TAIL]
    keep = [*spread(list(kernels), 6), *spread(tma, 16), *(k for k in library if k in kernels)]
    chosen = [kernels[k] for k in dict.fromkeys(keep)]
    for i, p in enumerate(chosen):
        cfg, ws = configs(p)
        base = [("T", "float16"), ("D", 128), ("WG", cfg.wg), ("BN", cfg.bn), ("CAUSAL", True)]
        if p["producer"] and p["tma"]:  # inputs as the rendering passes them: the map, and the maps' scratch output
            threads[f"fam{i}"] = ws.threads()
            units.append(wrap(f"fam{i}", WS.source_text(ws), W.launch_bounds(ws.threads()),
                              [*io, ("tmap", "uint64")], [*out, ("maps", "uint64")], base + WS.stage_args(ws)))
        elif p["producer"]:
            threads[f"fam{i}"] = ws.threads()
            units.append(wrap(f"fam{i}", WS.source_text(ws), W.launch_bounds(ws.threads()), io, out,
                              base + WS.stage_args(ws)))
        else:
            threads[f"fam{i}"] = 128 * cfg.wg
            units.append(wrap(f"fam{i}", W.source(cfg.stages), W.launch_bounds(threads[f"fam{i}"]), io, out, base))
    ok, log = compile_check(units)
    assert ok, log[-3000:]
    assert "C751" not in log, "wgmma serialised"  # C7510-C7515: every wgmma of the kernel serialised
    regs = {m[1]: int(m[2]) for m in re.finditer(r"custom_kernel_(fam\d+)E[^']*'[^\n]*\n[^\n]*\n[^\n]*\n"
                                                  r"[^\n]*Used (\d+) registers", log)}
    assert regs.keys() == threads.keys(), log[-2000:]
    for name, r in regs.items():
        assert (r + 7) // 8 * 8 * threads[name] <= 65536, f"{name}: {r} registers x {threads[name]} threads"


def test_the_cuda_plan_is_made_once_per_shape_and_follows_the_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib

    mx = pytest.importorskip("mlx.core")
    A = importlib.import_module("ksearch.kernels.attention")
    for name in ("KSEARCH_WGMMA", "KSEARCH_WGMMA_CONFIG"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(device, "backend", lambda: "cuda")
    monkeypatch.setattr(device, "hopper", lambda: True)
    monkeypatch.setattr(WS, "tma_ready", lambda *_a: True)
    monkeypatch.setattr(WS, "attention_wgmma_ws", lambda q, k, v, causal, cfg: WS.config_name(cfg))
    planned: list[tuple] = []
    choose = A.wgmma_config
    monkeypatch.setattr(A, "wgmma_config", lambda *a: planned.append(a) or choose(*a))
    A.clear_plans()
    q = mx.zeros((1, 8, 256, 64), dtype=mx.float16)
    k = mx.zeros((1, 2, 256, 64), dtype=mx.float16)
    assert [A.attention(q, k, k, True) for _ in range(3)] == ["ws2_n128_s3_p4_tmas_pst_sn"] * 3
    assert len(planned) == 1  # once for the shape, not once a call
    assert A.prefill_plan(q, k, k, True)[0] == "ws2_n128_s3_p4_tmas_pst_sn" and len(planned) == 1
    assert A.attention(q[:, :, :128], k, k, True) == "ws2_n128_s3_p4_tmas_pst_sn" and len(planned) == 2  # a new shape
    monkeypatch.setenv("KSEARCH_WGMMA_CONFIG", "ws3_n64_s4_p4_tmas")  # a setting changed: a plan of its own
    assert A.attention(q, k, k, True) == "ws3_n64_s4_p4_tmas"
    monkeypatch.setenv("KSEARCH_WGMMA", "0")
    assert A.prefill_plan(q, k, k, True)[0] == "mma_sync_m128_n64_db"
    for name in ("KSEARCH_WGMMA", "KSEARCH_WGMMA_CONFIG"):
        monkeypatch.delenv(name)
    # A plan's runner looks its kernel function up when called: what is in place then is what runs.
    monkeypatch.setattr(WS, "attention_wgmma_ws", lambda *_a: "replaced")
    assert A.attention(q, k, k, True) == "replaced" and len(planned) == 3
