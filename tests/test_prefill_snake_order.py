"""Persistent items in snake order (`_sn`): named and refused where it cannot apply, the kernel's own next-item formula
visiting every item once in the order the schedule estimate deals them, the estimate's figures, and the kernels
compiled for sm_90a."""

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


@pytest.mark.parametrize("name", ["ws3_n64_s4_p4_tmas_pst_preg32_cr_sn", "ws2_n128_s3_p4_tmas_pst_sn",
                                  "ws3_n64_s4_p4_tmas_pst_qn_preg32_cr_qp_wt_sn"])
def test_names_round_trip(name: str) -> None:
    cfg = WS.parse_config(name)
    assert cfg.snake and WS.config_name(cfg) == name and WS.kernel_name(cfg).endswith("_sn")
    assert "next_item" in WS.source_text(cfg)
    assert "next_item" not in WS.source_text(WS.parse_config(name.replace("_sn", "")))


@pytest.mark.parametrize("name", ["ws3_n64_s4_p4_tmas_cr_sn", "ws3_n64_s4_p4_bulk_sn"])
def test_without_persistent_blocks_it_is_refused_in_one_line(name: str) -> None:
    with pytest.raises(ValueError, match="_sn .* persistent blocks") as err:
        WS.parse_config(name)
    assert "\n" not in str(err.value)


def kernel_next_item() -> str:
    """The next-item lambda's return expression in the kernel's text, as Python (gridDim.x -> G, blockIdx.x -> b)."""
    text = WS.source_text(WS.parse_config("ws3_n64_s4_p4_tmas_pst_qn_preg32_cr_qp_sn"))
    body = text[text.index("auto next_item = [&](int it) {"):]
    r_line = re.search(r"const int r = (.*?);", body)
    ret = re.search(r"return (.*?);\n", body)
    assert r_line and ret
    py = f"(lambda r: {ret[1]})({r_line[1]})"
    py = py.replace("(int)gridDim.x", "G").replace("(int)blockIdx.x", "b").replace(" / ", " // ")  # int division
    py = re.sub(r"\(\(r & 1\) \? (.*?) : (.*?)\)\)", r"((\1) if (r & 1) else (\2)))", py)
    assert "?" not in py and "&&" not in py, py
    return py


@pytest.mark.parametrize(("items", "grid"), [(704, 132), (1376, 132), (352, 132), (131, 132), (7, 3), (12, 4)])
def test_the_kernels_order_visits_every_item_once_as_the_estimate_deals_them(items: int, grid: int) -> None:
    expr = kernel_next_item()
    seen: dict[int, int] = {}
    for b in range(grid):  # the kernel's loop: item = blockIdx.x; item < ITEMS; item = next_item(item)
        item = b
        while item < items:
            assert item not in seen, (item, b)
            seen[item] = b
            item = eval(expr, {"G": grid, "b": b, "it": item})  # noqa: S307 - the kernel's own formula
    assert sorted(seen) == list(range(items))
    # the schedule estimate deals item k to the same block
    for k, b in seen.items():
        rnd, pos = divmod(k, grid)
        assert b == (grid - 1 - pos if rnd % 2 else pos)
    # every place the plain order stepped a round on now asks for the next item
    text = WS.source_text(WS.parse_config("ws3_n64_s4_p4_tmas_pst_qn_preg32_cr_qp_sn"))
    assert not any(step in text for step in ("item += gridDim.x", "item + (int)gridDim.x", "item + gridDim.x"))
    assert text.count("item = next_item(item))") == 2 and text.count("next_item(item)") == 6


def test_the_estimate_evens_the_causal_blocks_and_leaves_equal_items_alone(capsys: pytest.CaptureFixture[str]) -> None:
    costs = [t + 3.0 for t in TILES.item_tiles(4096, 4096, True, 192, 64, 32)]
    assert len(costs) == 704 and costs[0] == 67 and costs[-1] == 6
    plain, snake = TILES.busiest_over_mean(costs, 132, False), TILES.busiest_over_mean(costs, 132, True)
    assert round(plain, 3) == 1.163 and round(snake, 3) == 1.012
    equal = [67.0] * 704
    assert TILES.busiest_over_mean(equal, 132, False) == TILES.busiest_over_mean(equal, 132, True)
    assert TILES.main(["--schedule", "ws3_n64_s4_p4_tmas_pst_preg32_cr", "--lengths", "8192", "--batches", "4"]) == 0
    out = capsys.readouterr().out
    assert "causal   5504 items on  132 blocks: busiest/mean plain 1.019 snake 1.002" in out
    with pytest.raises(SystemExit, match="positive whole numbers"):
        TILES.main(["--schedule", "--sms", "0"])


@pytest.mark.skipif(nvcc_path() is None, reason="nvcc not installed")
def test_it_compiles_for_sm_90a_with_its_main_loop_unspilled() -> None:
    units = [tensor_copy_unit(f"sn{i}_0", WS.parse_config(name), 128, True)
             for i, name in enumerate(("ws3_n64_s4_p4_tmas_pst_preg32_cr_wt_sn", "ws3_n64_s4_p4_tmas_pst_qn_preg32_cr_qp_sn"))]
    ok, log = compile_check([WGMMA_HEADER, tensor_map.TMA_HEADER, *units])
    assert ok, log[-3000:]
    assert "C751" not in log, "wgmma serialised"  # C7510-C7515: every wgmma of the kernel serialised
    spills = [k.spill_store_bytes for k in parse_ptxas(log)]
    assert len(spills) == 2 and max(spills) == 0, log[-3000:]
