"""Conditional rescale in the wgmma prefill (`_cr`): the name round-trips, the softmax keeps a row's maximum while it
grows by at most 2^8, O's multiply is voted and sits where no wgmma is in flight, and the kernels compile for sm_90a
without serialised wgmma or more spills. Correctness and speed on the GPU: benchmarks/attention_wgmma_check.py."""

from __future__ import annotations

import pytest

from ksearch.backends.nvcc import compile_check, nvcc_path, wrap
from ksearch.kernels import tensor_map
from ksearch.kernels.attention import wgmma as W
from ksearch.kernels.attention import wgmma_ws as WS
from ksearch.kernels.attention.wgmma_ws_text import conditional_rescale
from ksearch.kernels.cuda_headers import WGMMA_HEADER
from ksearch.knowledge.resources import parse_ptxas


@pytest.mark.parametrize("name", ["ws3_n64_s4_p4_tmas_cr", "ws2_n128_s3_p4_tmas_pst_cr", "ws3_n64_s4_p4_cr",
                                  "ws2_n64_s4_p0_cr", "ws3_n64_s4_p4_tmas_st4_cr_ca"])
def test_name_round_trips_and_changes_the_kernel_name(name: str) -> None:
    cfg = WS.parse_config(name)
    assert cfg.crescale and WS.config_name(cfg) == name and "_cr" in WS.kernel_name(cfg)
    plain = WS.parse_config(name.replace("_cr", ""))
    assert not plain.crescale and WS.kernel_name(plain) != WS.kernel_name(cfg)


def _step_bodies(text: str) -> list[str]:
    """The two unrolled steps of the main loop, each from its `const int t` to its last release."""
    starts = [text.index("const int t = t0;"), text.index("const int t = t0 + 1;")]
    return [text[s:text.index("release(vempty, t - 1);", s)] for s in starts]


@pytest.mark.parametrize("name", ["ws3_n64_s4_p4_tmas", "ws2_n128_s3_p4_tmas_pst", "ws3_n64_s4_p4_pp"])
def test_rescale_moves_before_s_and_is_voted(name: str) -> None:
    plain, cr = WS.source_text(WS.parse_config(name)), WS.source_text(WS.parse_config(name + "_cr"))
    for body in _step_bodies(plain):  # before: under S(t), between issue_s and the wait on it
        assert body.index("issue_s(t);") < body.index("rescale();") < body.index("ks_wg_wait1();")
    for body in _step_bodies(cr):  # after: first in the step, where the last step's products have all completed
        assert body.count("rescale();") == 1 and body.index("rescale();") < body.index("issue_s(t);")
        assert body.index("rescale();") < body.index("ks_wg_fence();")
    assert cr.count("rescale();") == plain.count("rescale();") == 3
    assert "__any_sync(0xffffffffu, corr[0] != 1.f || corr[1] != 1.f)) return;" in cr
    assert "(mx[r] - mrow[r]) * sl2 <= 8.f" in cr and "keep ? 1.f : ks_exp2(" in cr
    assert "__any_sync" not in plain and "keep ?" not in plain


def test_a_kernel_text_without_the_softmax_is_refused() -> None:
    with pytest.raises(RuntimeError, match="prefill kernel text"):
        conditional_rescale(WS.SOURCE_TMA.replace("rescale();", "", 1))


@pytest.mark.skipif(nvcc_path() is None, reason="nvcc not installed")
def test_compiles_without_serialising_or_spilling_more() -> None:
    combos = [("ws3_n64_s4_p4_tmas", "float16", 128, True), ("ws2_n128_s3_p4_tmas_pst", "bfloat16", 128, False),
              ("ws2_n128_s3_p4_tmas_pst", "float16", 64, True)]
    units = []
    for i, (name, dt, d, causal) in enumerate(combos):
        for tag in ("", "_cr"):
            cfg = WS.parse_config(name + tag)
            units.append(wrap(f"cr{i}{'c' if tag else 'p'}_0", WS.source_text(cfg),
                              W.launch_bounds(cfg.threads(), cfg.blocks),
                              [("q", "T"), ("k", "T"), ("v", "T"), ("scale", "float32"), ("tmap", "uint64")],
                              [("o", "T"), ("maps", "uint64")],
                              [("T", dt), ("D", d), ("WG", cfg.wg), ("BN", cfg.bn), ("CAUSAL", causal),
                               *WS.stage_args(cfg)]))
    ok, log = compile_check([WGMMA_HEADER, tensor_map.TMA_HEADER, *units])
    assert ok, log[-3000:]
    # C7513 / C7514: a branch between a wgmma and its wait made ptxas serialise every wgmma of the kernel
    assert "C751" not in log, "wgmma serialised"  # C7510-C7515: every wgmma of the kernel serialised
    spills = {r.kernel: r.spill_store_bytes for r in parse_ptxas(log)}
    assert len(spills) == 2 * len(combos), log[-3000:]
    for i in range(len(combos)):
        assert spills[f"cr{i}c"] <= spills[f"cr{i}p"] + 4, spills
