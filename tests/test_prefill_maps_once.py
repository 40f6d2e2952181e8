"""One pair of tensor maps a launch (`_m1`): named, refused where it cannot apply, a block publishing only where the
scratch output does not already hold the pair it would publish, and compiled for sm_90a."""

from __future__ import annotations

import re

import pytest
from prefill_units import tensor_copy_unit

from ksearch.backends.nvcc import compile_check, nvcc_path
from ksearch.kernels import tensor_map
from ksearch.kernels.attention import wgmma_ws as WS
from ksearch.kernels.attention import wgmma_ws_text as TXT
from ksearch.kernels.cuda_headers import WGMMA_HEADER
from ksearch.knowledge.resources import parse_ptxas


@pytest.mark.parametrize("name", ["ws3_n64_s4_p4_tmas_cr_m1", "ws3_n64_s4_p4_tmas_cr_qp_m1", "ws2_n128_s3_p4_tma_m1_ca"])
def test_names_round_trip(name: str) -> None:
    cfg = WS.parse_config(name)
    assert cfg.maps1 and WS.config_name(cfg) == name and "_m1" in WS.kernel_name(cfg)
    assert ("MAPS1", True) in WS.stage_args(cfg)
    assert ("MAPS1", False) in WS.stage_args(WS.parse_config(name.replace("_m1", "")))


@pytest.mark.parametrize("name", ["ws3_n64_s4_p4_tmas_pst_m1", "ws3_n64_s4_p4_bulk_m1", "ws2_n64_s3_p4_m1"])
def test_without_tensor_copies_or_with_persistent_blocks_it_is_refused_in_one_line(name: str) -> None:
    with pytest.raises(ValueError, match="_m1 .* one block an item") as err:
        WS.parse_config(name)
    assert "\n" not in str(err.value)


def test_a_block_publishes_only_where_the_scratch_does_not_already_hold_its_pair() -> None:
    text = TXT.PRODUCER_TMA
    built = text.index("ks_tmap_address(smap + 16, v);")
    look = text.index("ld.relaxed.gpu.global.u64 %0, [%1];")
    guard = text.index("if (!published) {")
    pubs = [m.start() for m in re.finditer(r"ks_tmap_publish\(", text)]
    first_copy = text.index("ks_tmap_acquire(gmap);")
    assert built < look < guard < pubs[0] < pubs[1] < first_copy and len(pubs) == 2
    # all 32 words of the pair compared, every lane its own, and the warp agreeing: the publication is a warp's
    assert '"l"(gmap + lane)' in text[look:guard] and "__all_sync(0xffffffffu, held == smap[lane])" in text[look:guard]
    # with MAPS1 every block's pair lies at the scratch's start; without it each block keeps its own slot
    assert "if (MAPS1) gmap = " in text[:built] and "blockIdx.x) * 32;" in text[:built]


@pytest.mark.skipif(nvcc_path() is None, reason="nvcc not installed")
def test_it_compiles_for_sm_90a_without_spills() -> None:
    units = [tensor_copy_unit(f"m1c{i}_0", WS.parse_config("ws3_n64_s4_p4_tmas_cr_m1"), 128, causal)
             for i, causal in enumerate((False, True))]
    ok, log = compile_check([WGMMA_HEADER, tensor_map.TMA_HEADER, *units])
    assert ok, log[-3000:]
    assert "C751" not in log, "wgmma serialised"  # C7510-C7515: every wgmma of the kernel serialised
    spills = [k.spill_store_bytes for k in parse_ptxas(log)]
    assert len(spills) == 2 and max(spills) <= 8, log[-3000:]
