"""The prefill's L2 prefetch of the next item's Q (`_qp`): named, refused without tensor copies, compiled out of the
kernels that do not ask for it, and compiled for sm_90a into the ones that do."""

from __future__ import annotations

import pytest
from prefill_units import tensor_copy_unit

from ksearch.backends.nvcc import compile_check, nvcc_path
from ksearch.kernels import tensor_map
from ksearch.kernels.attention import wgmma_ws as WS
from ksearch.kernels.attention import wgmma_ws_text as TXT
from ksearch.kernels.cuda_headers import WGMMA_HEADER
from ksearch.knowledge.resources import parse_ptxas

PREFETCH = "cp.async.bulk.prefetch.L2.global"


@pytest.mark.parametrize("name", ["ws3_n64_s4_p4_tmas_cr_qp", "ws3_n64_s4_p4_tmas_pst_preg32_cr_qp",
                                  "ws2_n128_s3_p4_tmas_pst_qp", "ws3_n64_s4_p4_tma_qp_ca"])
def test_prefetch_names_round_trip(name: str) -> None:
    cfg = WS.parse_config(name)
    assert cfg.qpf and WS.config_name(cfg) == name
    assert WS.kernel_name(cfg).endswith("_qp") and ("QPF", True) in WS.stage_args(cfg)
    plain = WS.parse_config(name.replace("_qp", ""))
    assert not plain.qpf and ("QPF", False) in WS.stage_args(plain)
    assert WS.kernel_name(plain) != WS.kernel_name(cfg)


def test_prefetch_without_tensor_copies_is_refused_in_one_line() -> None:
    for name in ("ws3_n64_s4_p4_bulk_qp", "ws2_n64_s3_p4_qp"):
        with pytest.raises(ValueError, match="_qp .* takes tensor copies") as err:
            WS.parse_config(name)
        assert "\n" not in str(err.value)
    # the bulk-copy fallback of a _qp configuration drops it with the tensor copies
    assert not WS.with_bulk_copies(WS.parse_config("ws3_n64_s4_p4_tmas_cr_qp")).qpf


def test_each_tensor_copy_kernel_prefetches_once_at_its_last_stages() -> None:
    # one block an item: the block one wave on; persistent: the block's next item, if it has one
    for text, guard in ((TXT.SOURCE_TMA, "if (nb < (int)(gridDim.x * gridDim.y))"),
                        (TXT.SOURCE_TMA_PERSIST, "item + (int)gridDim.x < ITEMS")):
        assert text.count(PREFETCH) == 1 and guard in text
        at = text.index(PREFETCH)
        assert "if (QPF && t == max(0, ntiles - STAGES)" in text[text.rindex("for (int t = 0;", 0, at):at]
    # the library's defaults are compiled without it (QPF a false constant), the bulk-copy kernels never see it
    for cfg in (WS.WsConfig(3, 64, 4, 4, tma=3, crescale=True), WS.WsConfig(2, 128, 3, 4, tma=3, persist=True)):
        assert ("QPF", False) in WS.stage_args(cfg)
    assert PREFETCH not in WS.source_text(WS.WsConfig(3, 64, 4, 4, bulk=True))


@pytest.mark.skipif(nvcc_path() is None, reason="nvcc not installed")
def test_prefetching_kernels_compile_for_sm_90a_without_serialising() -> None:
    names = [("ws3_n64_s4_p4_tmas_cr_qp", 128, False), ("ws3_n64_s4_p4_tmas_pst_preg32_cr_qp", 128, True),
             ("ws2_n128_s3_p4_tmas_pst_qp", 64, False)]
    units = [tensor_copy_unit(f"qp{i}_0", WS.parse_config(name), d, causal) for i, (name, d, causal) in enumerate(names)]
    ok, log = compile_check([WGMMA_HEADER, tensor_map.TMA_HEADER, *units])
    assert ok, log[-3000:]
    assert "C751" not in log, "wgmma serialised"  # C7510-C7515: every wgmma of the kernel serialised
    spills = {int(k.kernel[2:]): k.spill_store_bytes for k in parse_ptxas(log)}
    assert sorted(spills) == [0, 1, 2], log[-3000:]
    # one block an item spills nothing; the persistent producers' loops at most what they spill without it (prefill_sass.py:
    # WIDE_PERSIST 0 -> 8 bytes at D=128, TALL 76 -> 60)
    assert spills[0] == 0 and spills[1] <= 16 and spills[2] <= 96, spills
