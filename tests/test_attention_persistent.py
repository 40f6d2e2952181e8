"""Persistent blocks for the tensor-copy prefill (`_pst`): one block a multiprocessor walks the work items, its
producer running on into the next item. Names and refusals, the grid, the schedule's text (every item once, stages by
a running count, the last tile's stage released), one launch's arguments made once per shape, the SM count from the
driver, and the kernel compiled for sm_90a. Correctness and speed on the GPU: `attention_gpu.py check-prefill` (cases
with more work items than SMs) and `ksearch bench attention --full --configs ..._pst`."""

from __future__ import annotations

import ctypes
import re
from typing import Any

import pytest
from prefill_units import tensor_copy_unit

from ksearch.backends.nvcc import compile_check, nvcc_path
from ksearch.errors import BackendUnavailable
from ksearch.kernels import device, tensor_map
from ksearch.kernels.attention import wgmma as W
from ksearch.kernels.attention import wgmma_ws as WS
from ksearch.kernels.attention import wgmma_ws_text as WT
from ksearch.kernels.cuda_headers import WGMMA_HEADER


def test_persistent_names_parse_and_need_tensor_copies() -> None:
    cfg = WS.parse_config("ws2_n128_s3_p4_tmas_pst")
    assert cfg == WS.WsConfig(2, 128, 3, 4, tma=3, persist=True)
    assert WS.config_name(cfg) == "ws2_n128_s3_p4_tmas_pst"
    assert WS.config_name(WS.parse_config("ws1_n64_s2_p1_tma_pst_b2_ca")) == "ws1_n64_s2_p1_tma_pst_b2_ca"
    assert WS.parse_config("ws2_n128_s3_p4_tmas_pst_pp").pp  # ping-pong across the items too
    for bad in ("ws3_n64_s4_p4_pst", "ws3_n64_s4_p4_bulk_pst"):
        with pytest.raises(ValueError, match="_pst .persistent blocks. takes tensor copies"):
            WS.parse_config(bad)


def test_the_next_items_q_loads_under_the_epilogue() -> None:
    cfg = WS.parse_config("ws2_n128_s3_p4_tmas_pst_qn_preg32")
    assert (cfg.qnext, cfg.preg, WS.config_name(cfg)) == (True, 32, "ws2_n128_s3_p4_tmas_pst_qn_preg32")
    assert ("QNEXT", True) in WS.stage_args(cfg) and ("QNEXT", False) in WS.stage_args(WS.parse_config(
        "ws2_n128_s3_p4_tmas_pst"))
    assert not any(name == "QNEXT" for name, _ in WS.stage_args(WS.parse_config("ws3_n64_s4_p4_tmas")))
    with pytest.raises(ValueError, match="_qn .* is for persistent blocks"):
        WS.parse_config("ws2_n128_s3_p4_tmas_qn")
    src = WS.SOURCE_TMA_PERSIST
    # after the item's last product has completed and its last stage is released, before its O is stored
    last, nxt, epilogue = (src.index("release(vempty, ntiles - 1);"), src.index("if (QNEXT && item"),
                           src.index("const float lrow[2]"))
    assert last < nxt < epilogue and src.rindex("ks_wg_wait0();", 0, nxt) > src.rindex("issue_pv(ntiles - 1", 0, nxt)
    # the next item's rows, as ITEM_COORDS computes this item's (MT - 1 - item / BH, item % BH)
    assert "nm0 = (MT - 1 - nx / BH) * BM" in WT.Q_NEXT and "(nx % BH) * L + nm0 + wg * 64" in WT.Q_NEXT
    # the loop's own load only for a block's first item when the previous one loaded it
    assert src.count("if (!QNEXT || item == blockIdx.x)") == 2


def test_a_producer_warpgroups_registers_are_named_and_bounded() -> None:
    cfg = WS.parse_config("ws3_n64_s4_p4_tmas_pst_preg32")
    assert (cfg.preg, WS.config_name(cfg)) == (32, "ws3_n64_s4_p4_tmas_pst_preg32")
    assert ("PREG", 32) in WS.stage_args(cfg) and ("PREG", 24) in WS.stage_args(WS.WsConfig())
    assert WS.config_name(WS.WsConfig(3, 64, 4, 4, tma=3)) == "ws3_n64_s4_p4_tmas"  # 24: no suffix
    for bad in ("ws1_n64_s2_p1_tmas_preg32", "ws3_n64_s4_p4_tmas_preg30", "ws3_n64_s4_p4_tmas_preg72"):
        with pytest.raises(ValueError, match="_pregN sets a producer warpgroup's registers"):
            WS.parse_config(bad)
    # the kernels take both counts from template constants (the consumers' from consumer_registers, on the host)
    for src in (WS.SOURCE_TMA_PERSIST, WS.SOURCE_TMA):
        assert '"n"(PREG)' in src and '"n"(CREG)' in src and "65536" not in src


def test_the_schedule_visits_every_item_once_and_counts_stages_across_items() -> None:
    src = WS.SOURCE_TMA_PERSIST
    # producer and consumers walk the same items, in the same order
    assert src.count("for (int item = blockIdx.x; item < ITEMS; item += gridDim.x)") == 2
    mt_expr = re.search(r"const int mt = ([^;]+);", WT.ITEM_COORDS)[1]
    bhq_expr = re.search(r"const int bhq = ([^,]+),", WT.ITEM_COORDS)[1]
    assert "ITEMS = MT * BH" in src
    for mtiles, bh, grid in ((11, 32, 132), (1, 3, 3), (16, 128, 132), (7, 5, 35)):
        seen = []
        for block in range(grid):
            for item in range(block, mtiles * bh, grid):
                env = {"MT": mtiles, "BH": bh, "item": item}
                seen.append((eval(mt_expr.replace("/", "//"), {}, env), eval(bhq_expr, {}, env)))  # noqa: S307
        assert sorted(seen) == [(m, h) for m in range(mtiles) for h in range(bh)]
        # every head's longest causal rows (the last tile of rows) come first
        assert seen[0][0] == mtiles - 1
    # stages and phases follow the block's running count of tiles, never the item's own tile index alone
    code = re.sub(r"//[^\n]*", "", src)
    assert "t % STAGES" not in code.replace("(g0 + t) % STAGES", "").replace("gt % STAGES", "")
    assert "(t / STAGES)" not in code
    assert "g0 += ntiles;" in src and src.count("g0 += ntiles;") == 2
    # the last tile's V stage is released: the next item's tiles reuse it (one block an item never needed to)
    assert "release(vempty, ntiles - 1);" in src and "release(vempty, ntiles - 1);" not in WS.SOURCE_TMA
    # maps are published once a block, into the block's own slot
    assert src.count("ks_tmap_publish(gmap, smap);") == 1 and "(size_t)blockIdx.x * 32;" in src




def test_one_launch_is_made_once_per_shape_with_one_block_an_sm(monkeypatch: pytest.MonkeyPatch) -> None:
    mx = pytest.importorskip("mlx.core")
    built: list[tuple[Any, ...]] = []
    monkeypatch.setattr(WS, "build_kernel", lambda *a: built.append(a) or "kernel")
    monkeypatch.setattr(WS, "map_input", lambda *a, **k: "map")
    monkeypatch.setattr(device, "cuda_sm_count", lambda: 132)
    WS._tma_launch.cache_clear()
    pst = WS.parse_config("ws2_n128_s3_p4_tmas_pst")
    kern, tmap, kw, counters = WS._tma_launch((2, 32, 2048, 128), (2, 8, 2048, 128), mx.float16, True, pst)
    assert (kern, tmap, counters) == ("kernel", ("map",), 0) and "_pst" in built[0][0] and built[0][1] == WS.source_text(pst)
    assert kw["grid"] == (132 * 384, 1, 1) and kw["threadgroup"] == (384, 1, 1)  # 1,024 items over 132 SMs
    assert kw["output_shapes"] == [(2, 32, 2048, 128), (132 * 32 + 16,)]  # a maps slot a block
    # the template arguments are the kernel's constants, written into its text; calls pass none
    assert ("CAUSAL", True) in built[0][6] and ("WG", 2) in built[0][6] and "template" not in kw
    WS._tma_launch((2, 32, 2048, 128), (2, 8, 2048, 128), mx.float16, True, pst)
    assert len(built) == 1  # the second call of the shape builds nothing
    # fewer items than SMs: one block each; one block an item without _pst
    _k, _m, kw, _c = WS._tma_launch((1, 2, 256, 128), (1, 1, 256, 128), mx.float16, False, pst)
    assert kw["grid"] == (4 * 384, 1, 1)
    _k, _m, kw, _c = WS._tma_launch((2, 32, 2048, 128), (2, 8, 2048, 128), mx.float16, False,
                                WS.parse_config("ws3_n64_s4_p4_tmas"))
    assert kw["grid"] == (11 * 512, 64, 1) and kw["output_shapes"][1] == (11 * 64 * 32 + 16,)
    WS._tma_launch.cache_clear()


def test_the_sm_count_comes_from_the_driver_or_says_why_not(monkeypatch: pytest.MonkeyPatch) -> None:
    device.cuda_sm_count.cache_clear()

    def no_driver(_name: str) -> None:
        raise OSError("libcuda.so.1: cannot open shared object file")

    monkeypatch.setattr(ctypes, "CDLL", no_driver)
    with pytest.raises(BackendUnavailable, match="SM count needs the CUDA driver"):
        device.cuda_sm_count()

    class Driver:  # answers as a driver with a 132-SM device 0 does
        def cuInit(self, _flags: int) -> int:  # noqa: N802 - the driver's names
            return 0

        def cuDeviceGet(self, dev: Any, _i: int) -> int:  # noqa: N802
            return 0

        def cuDeviceGetAttribute(self, out: Any, attr: int, _dev: Any) -> int:  # noqa: N802
            assert attr == device.CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT
            out._obj.value = 132
            return 0

    device.cuda_sm_count.cache_clear()
    monkeypatch.setattr(ctypes, "CDLL", lambda _name: Driver())
    assert device.cuda_sm_count() == 132
    device.cuda_sm_count.cache_clear()


@pytest.mark.parametrize("name", ["ws2_n128_s3_p4_tmas_pst", "ws2_n128_s3_p4_tmas_pst_preg32",
                                  "ws2_n128_s3_p4_tmas_pst_qn_preg64", "ws3_n64_s4_p4_tmas", "ws3_n64_s4_p4_tmas_preg32",
                                  "ws3_n64_s4_p4_tmas_pst_preg64", "ws2_n64_s3_p4"])
def test_setmaxnreg_asks_no_more_registers_than_the_block_has(name: str) -> None:
    # setmaxnreg.inc waits until the block's own registers allow it: asking more than the launch gave hangs the
    # kernel (two consumer warpgroups at 240 beside a producer keeping 32 did, on the H200)
    cfg = WS.parse_config(name)
    regs = WS.launch_registers(cfg)
    creg = WS.consumer_registers(cfg)
    assert regs * cfg.threads() >= 128 * cfg.preg + 128 * cfg.wg * creg
    assert creg % 8 == 0 and creg <= 240 and ("CREG", creg) in WS.stage_args(cfg)
    # what the 24-register producer always gave: three warpgroups 160, two 240; two beside 32 registers 232
    expect = {(3, 24): 160, (2, 24): 240, (3, 32): 160, (2, 32): 232}.get((cfg.wg, cfg.preg))
    assert expect is None or creg == expect


@pytest.mark.skipif(nvcc_path() is None, reason="nvcc not installed")
def test_persistent_kernels_compile_for_sm_90a() -> None:
    # the Hopper default TALL (D 64 and 128) and three warpgroups, both masks: no serialised wgmma. With the producer's
    # 24 registers ptxas spills 40-68 bytes in each (its loop's item state; one block an item spills none or 4): a
    # bound; with 32 (_preg32; two consumer warpgroups then keep 232) none
    combos = [("ws2_n128_s3_p4_tmas_pst", 64, True), ("ws2_n128_s3_p4_tmas_pst", 128, True),
              ("ws3_n64_s4_p4_tmas_pst", 128, False), ("ws2_n128_s3_p4_tmas_pst_preg32", 64, True),
              ("ws3_n64_s4_p4_tmas_pst_qn_preg32", 128, True), ("ws2_n128_s3_p4_tmas_pst_pp", 128, True)]
    units = [tensor_copy_unit(f"pst{i}", WS.parse_config(name), d, causal, "bfloat16" if d == 64 else "float16")
             for i, (name, d, causal) in enumerate(combos)]
    ok, log = compile_check([WGMMA_HEADER, tensor_map.TMA_HEADER, *units])
    assert ok, log[-3000:]
    assert "C751" not in log, "wgmma serialised"  # C7510-C7515: every wgmma of the kernel serialised
    spills = {int(m[1]): int(m[2]) for m in re.finditer(
        r"custom_kernel_pst(\d+)E[^']*'[^\n]*\n[^\n]*\n\s*\d+ bytes stack frame, (\d+) bytes spill stores", log)}
    assert sorted(spills) == list(range(len(combos))), log[-3000:]
    assert max(spills[i] for i in (0, 1, 2, 5)) <= 96 and spills[3] == spills[4] == 0, spills


def _pp_programs(wg: int, items: list[int], per_item_open: bool) -> list[list[tuple[str, int]]]:
    """Each consumer warpgroup's named-barrier operations in a persistent ping-pong block that walks `items` (their
    tile counts): a turn (wait on 8 + w, issue, arrive on 8 + (w + 1) % WG) for S(0), each step and the last P V.
    per_item_open: the last warpgroup opens and the first closes every item (the non-persistent kernel's order)."""
    progs: list[list[tuple[str, int]]] = []
    for w in range(wg):
        ops: list[tuple[str, int]] = []
        for k, ntiles in enumerate(items):
            if w == wg - 1 and (per_item_open or k == 0):
                ops.append(("arrive", 8))
            for _ in range(ntiles + 1):
                ops += [("sync", 8 + w), ("arrive", 8 + (w + 1) % wg)]
            if per_item_open and w == 0:
                ops.append(("sync", 8))
        if not per_item_open and w == 0:
            ops.append(("sync", 8))
        progs.append(ops)
    return progs


def _run_named_barriers(progs: list[list[tuple[str, int]]], rng: Any) -> str:
    """Run the warpgroups' operations in a random order, barriers of 256 threads (a warpgroup counts 128): 'ok', or
    what went wrong (a barrier completed by arrivals alone, or no warpgroup able to go on)."""
    pc = [0] * len(progs)
    count: dict[int, int] = {}
    waiting: dict[int, list[int]] = {}
    blocked: set[int] = set()
    while True:
        ready = [w for w in range(len(progs)) if w not in blocked and pc[w] < len(progs[w])]
        if not ready:
            return "ok" if all(pc[w] == len(progs[w]) for w in range(len(progs))) else "deadlock"
        w = rng.choice(ready)
        op, bar = progs[w][pc[w]]
        pc[w] += 1
        count[bar] = count.get(bar, 0) + 128
        if op == "sync":
            waiting.setdefault(bar, []).append(w)
            blocked.add(w)
        if count[bar] == 256:
            if not waiting.get(bar):
                return f"barrier {bar} completed by arrivals alone"
            blocked -= set(waiting.pop(bar))
            count[bar] = 0


@pytest.mark.parametrize("wg", [2, 3])
def test_persistent_ping_pong_turns_never_complete_a_barrier_by_arrivals_alone(wg: int) -> None:
    import random

    rng = random.Random(0)
    items = [3, 1, 4, 2]
    # the kernel's order: one opening arrival a block, one closing wait after the last item
    assert all(_run_named_barriers(_pp_programs(wg, items, False), rng) == "ok" for _ in range(300))
    # opening and closing every item races: the last warpgroup, done with an item, can arrive twice on the first
    # warpgroup's barrier before that one's closing wait
    outcomes = {_run_named_barriers(_pp_programs(wg, items, True), rng) for _ in range(300)}
    assert "barrier 8 completed by arrivals alone" in outcomes
    src = WS.SOURCE_TMA_PERSIST
    assert "if (PP && wg == WG - 1 && item == (int)blockIdx.x) pp_arrive();" in src
    assert src.count("if (PP && wg == 0)") == 1 and src.rstrip().endswith('"r"(8) : "memory");')


def test_every_configuration_compiles_under_a_name_of_its_own() -> None:
    # MLX keys a compiled kernel by its name alone: two configurations sharing one would run each other's kernel
    import itertools

    names: dict[str, WS.WsConfig] = {}
    for wg, bn, st, pw, cp, bulk, tma, pp, pst, qn, preg, blocks in itertools.product(
            (1, 2, 3), (64, 128), (2, 3, 4), (0, 1, 4), ("cg", "ca"), (False, True), (0, 1, 2, 3), (False, True),
            (False, True), (False, True), (24, 32), (1, 2)):
        cfg = WS.WsConfig(wg, bn, st, pw, cp=cp, bulk=bulk, tma=tma, pp=pp, persist=pst, qnext=qn, preg=preg,
                          blocks=blocks)
        if WS.config_problem(cfg) is None:
            assert names.setdefault(WS.kernel_name(cfg), cfg) == cfg, WS.kernel_name(cfg)
    assert len(names) > 1000


def test_the_epilogue_stores_16_bytes_a_lane_unless_4_are_named() -> None:
    # the measured default (WsConfig.store 0): the quad transpose in every kernel, persistent or not; `_st4` names
    # the 4-byte stores straight from the accumulators
    wide, tall = WS.parse_config("ws3_n64_s4_p4_tmas"), WS.parse_config("ws2_n128_s3_p4_tmas_pst")
    assert (WS.store_bytes(wide), WS.store_bytes(tall)) == (16, 16)
    for cfg in (wide, tall):
        assert "ks_quad_transpose" in WS.source_text(cfg) and W.EPILOGUE in WS.source_text(cfg)
        assert W.EPILOGUE_STORE4 not in WS.source_text(cfg)
    for name in ("ws3_n64_s4_p4_tmas_st4", "ws2_n128_s3_p4_tmas_pst_st4"):
        cfg = WS.parse_config(name)
        assert "ks_quad_transpose" not in WS.source_text(cfg) and W.EPILOGUE_STORE4 in WS.source_text(cfg)
        assert WS.config_name(cfg) == name and WS.kernel_name(cfg).endswith("_st4")
    # naming a kernel's own default is the same configuration, under one spelling
    assert WS.parse_config("ws2_n128_s3_p4_tmas_pst_st16") == tall and WS.parse_config("ws3_n64_s4_p4_tmas_st16") == wide
    assert WS.config_name(tall) == "ws2_n128_s3_p4_tmas_pst"
    with pytest.raises(ValueError, match="_st4 / _st16"):
        WS.parse_config("ws3_n64_s4_p4_tmas_st8")
    assert WS.config_problem(WS.WsConfig(3, 64, 4, 4, tma=3, store=8)) == "_stN stores O N bytes a lane: _st4 or _st16"


def test_the_epilogues_shuffles_run_outside_any_branch() -> None:
    # Under `if (row_lo < L) { ... }` the shuffles made ptxas give a persistent kernel's whole item loop up its uniform
    # datapath (the descriptors' arithmetic in vector registers, convergence barriers; seen in the SASS): only the
    # stores may be guarded.
    epilogue = W.EPILOGUE
    assert "if (row_lo < L) {" not in epilogue
    assert epilogue.index("ks_quad_transpose(") < epilogue.index("if (row_lo < L) *reinterpret_cast<uint4*>")


def test_o_by_one_bulk_copy_a_warpgroup_is_named_refused_with_qn_and_ordered() -> None:
    # `_ob`: O into the warpgroup's own Q rows, fenced for the async proxy, then one thread's
    # bulk copy, whose read of shared memory is waited for before Q's rows are written again
    cfg = WS.parse_config("ws2_n128_s3_p4_tmas_pst_ob")
    assert cfg.obulk and WS.config_name(cfg) == "ws2_n128_s3_p4_tmas_pst_ob" and WS.kernel_name(cfg).endswith("_ob")
    text = WS.source_text(cfg)
    assert W.EPILOGUE_BULK in text and W.EPILOGUE not in text and W.EPILOGUE_STORE4 not in text
    epi = W.EPILOGUE_BULK
    at = [epi.index(x) for x in ("T* os = Qs + wg * 64 * D;", "ks_proxy_fence();", "bar.sync", "ks_bulk_store(",
                                 "ks_bulk_wait_read();")]
    assert at == sorted(at) and epi.rindex("bar.sync") > at[-1]
    for bad in ("ws2_n128_s3_p4_tmas_pst_qn_ob", "ws3_n64_s4_p4_tmas_ob_st4"):
        with pytest.raises(ValueError, match="_ob copies O out of Q's rows"):
            WS.parse_config(bad)


@pytest.mark.skipif(nvcc_path() is None, reason="nvcc not installed")
def test_o_by_bulk_copy_compiles_without_serialising_or_spilling_more() -> None:
    combos = [("ws2_n128_s3_p4_tmas_pst", 64, False), ("ws3_n64_s4_p4_tmas_pst_preg32", 128, True),
              ("ws3_n64_s4_p4_tmas", 128, False)]
    units = [tensor_copy_unit(f"ob{i}{'b' if tag else 'p'}", WS.parse_config(name + tag), d, causal)
             for i, (name, d, causal) in enumerate(combos) for tag in ("", "_ob")]
    ok, log = compile_check([WGMMA_HEADER, tensor_map.TMA_HEADER, *units])
    assert ok, log[-3000:]
    assert "C751" not in log, "wgmma serialised"  # C7510-C7515: every wgmma of the kernel serialised
    spills = {m[1]: int(m[2]) for m in re.finditer(
        r"custom_kernel_(ob\d[bp])E[^']*'[^\n]*\n[^\n]*\n\s*\d+ bytes stack frame, (\d+) bytes spill stores", log)}
    assert len(spills) == 2 * len(combos), log[-3000:]
    # the persistent kernels spill what they spill without it; one block an item two registers more at most
    assert spills["ob0b"] <= spills["ob0p"] and spills["ob1b"] <= spills["ob1p"] and spills["ob2b"] <= 8, spills
