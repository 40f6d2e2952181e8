"""Persistent items a section of heads at a time (`_hs`): named and refused where it cannot apply, the kernel's own
item formula (taken from its text and run here) visiting every item once, a section at a time and each section's
items longest first, as the schedule model deals them, and the kernels compiled for sm_90a without spills."""

from __future__ import annotations

import re

import pytest
from prefill_units import tensor_copy_unit
from script_module import load_script

from ksearch.backends.nvcc import compile_check, nvcc_path
from ksearch.kernels import tensor_map
from ksearch.kernels.attention import wgmma_ws as WS
from ksearch.kernels.cuda_headers import WGMMA_HEADER
from ksearch.knowledge.resources import parse_ptxas

TILES = load_script("benchmarks/prefill_tile_count.py")
NAME = "ws3_n64_s4_p4_tmas_pst_preg32_cr_wt_sn_hs_uw"
TALL_SECTIONS = "ws2_n128_s3_p4_tmas_pst_preg32_sn_hs"  # at 24 producer registers TALL spills (prefill_sass.py)


@pytest.mark.parametrize("name", [NAME, TALL_SECTIONS])
def test_names_round_trip(name: str) -> None:
    cfg = WS.parse_config(name)
    assert cfg.sections and WS.config_name(cfg) == name and "_hs" in WS.kernel_name(cfg)
    assert "SEC" in WS.source_text(cfg) and "SEC" not in WS.source_text(WS.parse_config(name.replace("_hs", "")))
    assert not WS.with_bulk_copies(cfg).sections


@pytest.mark.parametrize("name", ["ws3_n64_s4_p4_tmas_cr_hs", "ws3_n64_s4_p4_tmas_pst_qn_hs",
                                  "ws3_n64_s4_p4_tmas_pst_qp_hs"])
def test_where_it_cannot_apply_it_is_refused_in_one_line(name: str) -> None:
    with pytest.raises(ValueError, match="_hs .* persistent blocks") as err:
        WS.parse_config(name)
    assert "\n" not in str(err.value)


def _as_python(expr: str) -> str:
    """A C integer expression of the kernel's item formula as Python (the cast dropped, division floored: every operand
    here is non-negative)."""
    py = expr.replace("(int)", "").replace("gridDim.x", "grid").replace(" / ", " // ")
    assert "?" not in py and "->" not in py, py
    return py


def kernel_formula() -> tuple[str, list[str]]:
    """(the section size's expression, the item coordinates' statements), from the kernel's text."""
    text = WS.source_text(WS.parse_config(NAME))
    sec = re.search(r"const int SEC = (.*?);\n", text, re.S)
    coords = re.search(r"const int hsec = (.*?);\n\s*const int mt = (.*?);.*?\n\s*const int bhq = (.*?),", text, re.S)
    assert sec and coords
    first = re.split(r", (?=\w+ = )", "hsec = " + coords[1])  # hsec = ..., hsn = ..., hsr = ...
    return _as_python(sec[1]), [_as_python(s) for s in [*first, f"mt = {coords[2]}", f"bhq = {coords[3]}"]]


@pytest.mark.parametrize(("b", "hq", "hkv", "length", "bm", "grid", "heads_a_section"),
                         [(4, 32, 32, 4096, 192, 132, 33), (4, 32, 8, 4096, 192, 132, 132), (1, 32, 32, 8192, 192, 132, 33),
                          (4, 32, 32, 2048, 128, 132, 33), (2, 6, 2, 1024, 192, 36, 27), (1, 3, 3, 100, 192, 3, 1)])
def test_the_kernels_items_are_every_item_once_a_section_at_a_time(b: int, hq: int, hkv: int, length: int, bm: int,
                                                                   grid: int, heads_a_section: int) -> None:
    sec_expr, statements = kernel_formula()
    q_shape, k_shape = (b, hq, length, 128), (b, hkv, length, 128)
    sec = eval(sec_expr, {"q_shape": q_shape, "k_shape": k_shape, "grid": grid, "max": max})  # noqa: S307
    assert sec == heads_a_section == TILES.section_heads(hq, hkv, grid)  # the query heads of grid / 4 K / V heads
    mt_count, bh = (length + bm - 1) // bm, b * hq
    order = []
    for item in range(mt_count * bh):
        env = {"item": item, "SEC": sec, "MT": mt_count, "BH": bh, "min": min}
        for statement in statements:
            name, expr = statement.split(" = ", 1)
            env[name] = eval(expr, env)  # noqa: S307 - the kernel's own formula
        order.append((env["mt"], env["bhq"]))
    assert sorted(order) == [(mt, h) for mt in range(mt_count) for h in range(bh)]  # every item once
    assert order == TILES.item_order(length, bm, bh, sec)  # the schedule model deals the same order
    for start in range(0, bh, sec):  # a section's items run together, longest causal rows first
        part = order[start * mt_count:(start + min(sec, bh - start)) * mt_count]
        assert {h for _, h in part} == set(range(start, min(start + sec, bh)))
        assert [mt for mt, _ in part] == sorted((mt for mt, _ in part), reverse=True)


def test_the_model_counts_the_k_v_heads_a_round_reads(capsys: pytest.CaptureFixture[str]) -> None:
    # B 4, Hkv 32, L=4096: the plain order's rounds read 124 K / V heads, about one item each; in sections 35, four
    assert TILES.main(["--schedule", NAME, NAME.replace("_hs", ""), "--lengths", "4096", "--batches", "4",
                       "--hkv", "32"]) == 0
    out = capsys.readouterr().out
    assert "K / V heads a round  124.2 (248 MiB, 1.1 items each)" in out
    assert "K / V heads a round   34.9 (70 MiB, 3.8 items each)" in out
    with pytest.raises(SystemExit, match="divisor"):
        TILES.main(["--schedule", "--hkv", "5"])


@pytest.mark.skipif(nvcc_path() is None, reason="nvcc not installed")
def test_it_compiles_for_sm_90a_unspilled() -> None:
    units = [tensor_copy_unit(f"hs{i}_{d}", WS.parse_config(name), d, causal)
             for i, (name, d, causal) in enumerate(((NAME, 128, False), (NAME, 128, True),
                                                    (TALL_SECTIONS, 64, True)))]
    ok, log = compile_check([WGMMA_HEADER, tensor_map.TMA_HEADER, *units])
    assert ok, log[-3000:]
    assert "C751" not in log, "wgmma serialised"  # C7510-C7515: every wgmma of the kernel serialised
    spills = [k.spill_store_bytes for k in parse_ptxas(log)]
    assert len(spills) == 3 and max(spills) == 0, log[-3000:]
