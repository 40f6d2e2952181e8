"""Uniform index arithmetic (`_uw`): named and refused where it cannot apply, the text it changes, and, with nvcc,
cuobjdump and nvdisasm present, what ptxas makes of it: no vector-to-uniform moves left in the main loop and fewer
instructions there than without it."""

from __future__ import annotations

import pytest
from script_module import load_script

from ksearch.backends.nvcc import nvcc_path
from ksearch.kernels.attention import wgmma_ws as WS

SASS = load_script("benchmarks/prefill_sass.py")
TOOLS = SASS.tool("cuobjdump") is not None and SASS.tool("nvdisasm") is not None and nvcc_path() is not None


@pytest.mark.parametrize("name", ["ws3_n64_s4_p4_tmas_cr_uw", "ws3_n64_s4_p4_tmas_pst_preg32_cr_wt_sn_uw",
                                  "ws2_n128_s3_p4_tmas_pst_sn_uw", "ws3_n64_s4_p4_bulk_cr_uw", "ws2_n64_s2_p1_uw_ca"])
def test_names_round_trip_and_the_text_reads_the_index_from_lane_0(name: str) -> None:
    cfg = WS.parse_config(name)
    assert cfg.uniform and WS.config_name(cfg) == name and WS.kernel_name(cfg).endswith("_uw")
    text, plain = WS.source_text(cfg), WS.source_text(WS.parse_config(name.replace("_uw", "")))
    assert "const int wg = __shfl_sync(0xffffffffu, threadIdx.x / 128, 0)," in text
    assert "const int wg = threadIdx.x / 128," in plain and "__shfl_sync(0xffffffffu, threadIdx.x" not in plain
    # a persistent block's running count of tiles: unsigned with `_uw`, int without; nothing else changes
    assert ("unsigned g0 = 0;" in text) == cfg.persist and "unsigned g0" not in plain
    assert len(text) - len(plain) == len("__shfl_sync(0xffffffffu, , 0)") + (len("unsigned") - len("int")) * cfg.persist


def test_without_a_producer_it_is_refused_in_one_line() -> None:
    with pytest.raises(ValueError, match="_uw .* producer kernels") as err:
        WS.parse_config("ws3_n64_s4_p0_uw")
    assert "\n" not in str(err.value)


@pytest.mark.skipif(not TOOLS, reason="no nvcc, cuobjdump or nvdisasm")
@pytest.mark.parametrize("name", ["ws3_n64_s4_p4_tmas_cr", "ws3_n64_s4_p4_tmas_pst_preg32_cr_wt_sn"])
def test_ptxas_keeps_the_main_loop_on_the_uniform_datapath(name: str) -> None:
    cuobjdump = SASS.tool("cuobjdump")
    loops = {}
    for variant in (name, name + "_uw"):
        instructions, spill = SASS.compile_sass(variant, 128, False, "float16", cuobjdump)
        loop = SASS.main_loop(instructions)
        assert loop is not None and spill in (0, None), (variant, spill)
        loops[variant] = SASS.summary(loop, spill)
    plain, uniform = loops[name], loops[name + "_uw"]
    assert plain["r2ur"] > 0 and uniform["r2ur"] == 0 and uniform["hgmma"] == plain["hgmma"]
    assert uniform["main_loop"] < 0.95 * plain["main_loop"], (plain, uniform)
