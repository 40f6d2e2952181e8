"""benchmarks/prefill_item_trace.py: the stamps land where their phases say, the stamped kernels compile as the
library's do (no serialised wgmma, no more spills), which records a launch wrote, and what a trace reads as."""

import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from script_module import load_module

from ksearch.backends.nvcc import compile_check, nvcc_path, wrap
from ksearch.kernels import tensor_map
from ksearch.kernels.attention import wgmma_ws as WS
from ksearch.kernels.cuda_headers import WGMMA_HEADER

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks/prefill_item_trace.py"
trace_script = load_module(SCRIPT)


@pytest.mark.parametrize("name", ["ws3_n64_s4_p4_tmas", "ws2_n128_s3_p4_tmas_pst", "ws2_n128_s3_p4_tmas_pst_st4",
                                  "ws2_n128_s3_p4_tmas_pst_ob", "ws3_n64_s4_p4_tmas_ob", "ws3_n64_s4_p4_tmas_pst_qn_preg32"])
def test_the_stamps_sit_in_order_around_the_phases(name: str) -> None:
    cfg = WS.parse_config(name)
    persist = cfg.persist
    text = trace_script.stamped_source(cfg)
    consumer = text[text.index("setmaxnreg.inc"):]  # the stamps belong to the consumers' path
    at = [consumer.index(f"KS_STAMP({i})") for i in range(1, 5)]
    assert at == sorted(at)
    assert consumer.index("bar.sync %0, 128;") < at[0] < consumer.index("issue_s(0);") < at[1]
    assert at[1] < consumer.index("softmax(0);") and at[2] < consumer.index("const float lrow[2]") < at[3]
    start = text.index("KS_STAMP(0)")
    assert start < text.index("setmaxnreg.inc") if not persist else start > text.index("for (int item = blockIdx.x")
    # the Q copy's issue after the consumers' set-up; the maps' stamp in the producer's thread once they are fenced
    assert start < text.index("KS_STAMP(9)") < consumer.index("bar.sync %0, 128;") + text.index("setmaxnreg.inc")
    assert consumer.index("KS_STAMP(9)") < consumer.index("ks_load_core<D, 128, 64>(Qs + wg * 64 * D, qg")
    maps = text.index("+ 8] = (unsigned long long)clock64();")
    assert text.index("ks_tmap_acquire(gmap + 16);") < maps < text.index("setmaxnreg.inc")


def test_a_kernel_text_that_moved_fails_at_the_splice() -> None:
    with pytest.raises(RuntimeError, match="occurs 0 times"):
        trace_script._insert("no anchor here", "release(kempty, 0);", "KS_STAMP(2);")


def test_only_the_records_a_launch_wrote_are_read() -> None:
    # 3 blocks walking 7 items: block 0 runs items 0, 3, 6; blocks 1 and 2 two items each
    assert trace_script.ran(3, 3, 7).tolist() == [[True, True, True], [True, True, False], [True, True, False]]
    slots = trace_script.SLOTS
    trace = np.full((3, 3, slots), 999_999, dtype=np.int64)  # what the allocator left: never read
    for b in range(3):
        for j in range(3 if b == 0 else 2):
            t0 = 1000 * (3 * j + b)
            trace[b, j, :5] = [t0, t0 + 50, t0 + 80, t0 + 80 + 400, t0 + 500]  # 4 tiles of 100 cycles
            trace[b, j, 5] = 4
            trace[b, j, 6:8] = [t0, t0 + 500]
            trace[b, j, 9] = t0 + 20  # the Q copy issued 20 cycles in
            if j == 0:
                trace[b, j, 8] = t0 + 30 + 10 * b  # the maps: a block's first item only (the rest never read)
    got = trace_script.phases(trace, 7)
    assert got["items"] == 7 and got["loop_cycles_a_tile"] == 100.0
    assert got["cycles"] == {"q_load": 50.0, "first_product": 30.0, "loop": 400.0, "epilogue": 20.0, "set_up": 20.0,
                             "q_copy": 30.0, "maps_ready": 40.0}
    assert got["in_tiles"]["maps_ready"] == 0.4 and "loop" not in got["in_tiles"]
    assert got["beyond_tiles_in_tiles"] == pytest.approx(1.0)
    assert got["between_items_cycles"] == 2500.0  # the next item of a block starts 3000 cycles after this one
    assert got["kernel_span_ns"] == 6500
    assert got["sm_clock_ghz"] == 1.0  # each item's 500 cycles took 500 ns


def test_in_snake_order_the_records_read_are_those_the_kernels_order_wrote() -> None:
    # 3 blocks, 7 items in snake order: block 0 runs items 0, 5, 6; block 1 items 1, 4; block 2 items 2, 3
    assert trace_script.ran(3, 3, 7, snake=True).tolist() == [[True, True, True], [True, True, False],
                                                               [True, True, False]]
    assert trace_script.ran(3, 3, 8, snake=True).tolist() == [[True, True, True], [True, True, True],
                                                               [True, True, False]]
    text = trace_script.stamped_source(WS.parse_config("ws3_n64_s4_p4_tmas_pst_preg32_cr_sn"))
    loop = text.index("item = next_item(item)) {")
    assert loop < text.index("((size_t)blockIdx.x * MAXI + item / (int)gridDim.x)") < text.index("KS_STAMP(0)")


def test_with_own_tiles_the_stamps_read_the_last_warpgroup_which_runs_every_tile() -> None:
    assert trace_script.tracer_thread(WS.parse_config("ws3_n64_s4_p4_tmas_cr_wt")) == 256
    assert trace_script.tracer_thread(WS.parse_config("ws2_n128_s3_p4_tmas_pst_wt")) == 128
    assert trace_script.tracer_thread(WS.parse_config("ws3_n64_s4_p4_tmas_cr")) == 0
    assert "#define KS_TRACER 256\n" in trace_script.stamped_header(WS.parse_config("ws3_n64_s4_p4_tmas_cr_wt"))
    text = trace_script.stamped_source(WS.parse_config("ws3_n64_s4_p4_tmas_cr_wt"))
    assert "if (threadIdx.x == KS_TRACER) trace[ks_tr + 5]" in text and "KS_TRACER" in trace_script.STAMP_HEADER


def test_configurations_without_tensor_copies_are_refused_in_one_line() -> None:
    proc = subprocess.run([sys.executable, str(SCRIPT), "/tmp/unused", "--configs", "ws3_n64_s4_p4_bulk"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode != 0 and "name a _tma / _tmas configuration" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1


@pytest.mark.skipif(nvcc_path() is None, reason="nvcc not installed")
def test_stamped_kernels_compile_like_the_librarys() -> None:
    combos = [("ws3_n64_s4_p4_tmas", 128, False), ("ws3_n64_s4_p4_tmas_pst_preg32", 128, True),
              ("ws2_n128_s3_p4_tmas_pst", 64, True), ("ws2_n128_s3_p4_tmas_pst_ob", 64, False),
              ("ws3_n64_s4_p4_tmas_pst_qn_preg32", 128, False), ("ws3_n64_s4_p4_tmas_pst_preg32_cr_wt_sn", 128, True),
              ("ws3_n64_s4_p4_tmas_cr_wt", 128, False)]
    units = []
    for i, (name, d, causal) in enumerate(combos):
        cfg = WS.parse_config(name)
        # plain, stamped, and (the first two) stamped with every --strip: k{i}p, k{i}s, k{i}x
        kinds = ("p", "s", "x") if i < 2 else ("p", "s")
        for kind in kinds:
            source = (WS.source_text(cfg) if kind == "p" else trace_script.stamped_source(
                cfg, tuple(trace_script.STRIPS) if kind == "x" else ()))
            header = WS.launch_bounds(cfg.threads(), cfg.blocks) + (trace_script.stamp_macros(cfg) if kind != "p" else "")
            outputs = [("o", "T"), ("maps", "uint64")] + ([("trace", "uint64")] if kind != "p" else [])
            units.append(wrap(f"k{i}{kind}", source, header,
                              [("q", "T"), ("k", "T"), ("v", "T"), ("scale", "float32"), ("tmap", "uint64")], outputs,
                              [("T", "float16"), ("D", d), ("WG", cfg.wg), ("BN", cfg.bn), ("CAUSAL", causal),
                               *WS.stage_args(cfg), ("MAXI", 4)]))
    ok, log = compile_check([WGMMA_HEADER, tensor_map.TMA_HEADER, *units])
    assert ok, log[-3000:]
    assert "C751" not in log, "wgmma serialised"  # C7510-C7515: every wgmma of the kernel serialised
    spills = {m[1]: int(m[2]) for m in re.finditer(
        r"custom_kernel_(k\d[sp])E[^']*'[^\n]*\n[^\n]*\n\s*\d+ bytes stack frame, (\d+) bytes spill stores", log)}
    assert len(spills) == 2 * len(combos), log[-3000:]
    for i in range(len(combos)):
        assert spills[f"k{i}s"] <= spills[f"k{i}p"], spills


def test_a_configuration_too_big_for_a_head_dimension_is_skipped_not_launched() -> None:
    assert trace_script.too_big(WS.parse_config("ws3_n64_s4_p4_tmas_pst_preg32"), 128) is None
    why = trace_script.too_big(WS.parse_config("ws2_n128_s4_p4_tmas_pst"), 128)
    assert why is not None and "296704 bytes of shared memory" in why
    assert trace_script.too_big(WS.parse_config("ws2_n128_s4_p4_tmas_pst"), 64) is None
    # two blocks an SM: each fits a block, together not an SM (the dispatch's own rule, wgmma_ws.smem_problem)
    two = WS.parse_config("ws1_n64_s4_p1_tmas_b2")
    assert "exceed an SM's" in (trace_script.too_big(two, 128) or "") and trace_script.too_big(two, 64) is None


@pytest.mark.parametrize("name", ["ws3_n64_s4_p4_tmas", "ws2_n128_s3_p4_tmas_pst"])
def test_strip_takes_the_exponentials_and_then_the_maxima_out_of_the_softmax(name: str) -> None:
    cfg = WS.parse_config(name)
    full, no_exp = trace_script.stamped_source(cfg), trace_script.stamped_source(cfg, ("exp",))
    both = trace_script.stamped_source(cfg, ("exp", "max"))
    assert full.count("ks_exp2(") == no_exp.count("ks_exp2(") + 1 == both.count("ks_exp2(") + 1  # corr's stays
    assert "fmaxf(mx[(i >> 1) & 1], s[i])" in no_exp and "fmaxf(mx[(i >> 1) & 1], s[i])" not in both
    assert "KS_STAMP(4)" in both  # the stamps unchanged
    no_rescale = trace_script.stamped_source(cfg, ("rescale",))
    assert "oacc[i] *= corr" in full and "oacc[i] *= corr" not in no_rescale


def test_a_bad_strip_is_refused_in_one_line() -> None:
    proc = subprocess.run([sys.executable, str(SCRIPT), "/tmp/unused", "--strip", "exp,sum"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode != 0 and "--strip takes exp, max, rescale" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1



def test_items_that_start_together_are_told_from_those_that_start_alone() -> None:
    # 4 items start at once (a wave) and load Q in 300 cycles; 2 start alone later and load it in 100
    starts = np.array([0, 10, 20, 30, 5_000, 9_000])
    q_load = np.array([300, 300, 300, 300, 100, 100])
    got = trace_script.start_crowds(starts, q_load, window_ns=100)
    assert got["start_crowd_max"] == 4 and got["crowded_items"] == 4 and got["start_crowd_median"] == 4.0
    assert got["q_load_crowded_cycles"] == 300.0 and got["q_load_uncrowded_cycles"] == 100.0
    assert got["q_load_first_wave_cycles"] == 300.0 and got["q_load_later_cycles"] == 100.0


def test_items_that_all_start_apart_make_no_crowd() -> None:
    got = trace_script.start_crowds(np.array([0, 1_000, 2_000]), np.array([5, 6, 7]), window_ns=100)
    assert got["start_crowd_max"] == 1 and got["start_crowd_median"] == 1.0
    assert got["crowded_items"] == 3 and got["q_load_uncrowded_cycles"] is None  # every crowd is the largest
    assert got["q_load_first_wave_cycles"] == 5.0 and got["q_load_later_cycles"] == 6.5


QT = "ws3_n64_s4_p4_tmas_pst_preg32_cr_wt_sn_hs_kt_uw_qt"


def test_q_by_tensor_copies_is_stamped_around_its_wait() -> None:
    cfg = WS.parse_config(QT)
    consumer = trace_script.stamped_source(cfg)
    consumer = consumer[consumer.index("setmaxnreg.inc"):]
    at = [consumer.index(f"KS_STAMP({i})") for i in (9, 1, 2, 3, 4)]
    assert at == sorted(at)
    # `_qt`: the consumers' wait for Q between stamps 9 and 1
    q_step = consumer.index("ks_mbar_wait(qfull")
    assert at[0] < q_step < at[1] < consumer.index("issue_s(0);")


@pytest.mark.skipif(nvcc_path() is None, reason="LOUD SKIP: nvcc not installed")
def test_its_stamped_kernel_compiles() -> None:
    from ksearch.kernels.attention.wgmma_ws_grid import kernel_io

    units = []
    for i, name in enumerate((QT,)):
        cfg = WS.parse_config(name)
        ins, outs = kernel_io(cfg)
        units.append(wrap(f"t{i}", trace_script.stamped_source(cfg),
                          WS.launch_bounds(cfg.threads(), cfg.blocks) + trace_script.stamp_macros(cfg), ins,
                          [*outs, ("trace", "uint64")],
                          [("T", "float16"), ("D", 128), ("WG", cfg.wg), ("BN", cfg.bn), ("CAUSAL", False),
                           *WS.stage_args(cfg), ("MAXI", 8)]))
    ok, log = compile_check([WGMMA_HEADER, tensor_map.TMA_HEADER, *units])
    assert ok, log[-3000:]
    assert "C751" not in log, "wgmma serialised"  # C7510-C7515: every wgmma of the kernel serialised
