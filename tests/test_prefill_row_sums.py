"""One row-sum product a tile (`_r1`, kernels/attention/wgmma_ws_row_sums.py) without a GPU: the name reads back, every
kind of wgmma prefill kernel takes the text change, and the fragment arithmetic, run on the host over wgmma's
register layouts, gives each row's sum of P."""

from __future__ import annotations

import importlib
from collections.abc import Callable

import numpy as np
import pytest

from ksearch.kernels.attention import wgmma_ws as WS

# the package, not the function ksearch.kernels exports under the same name
A = importlib.import_module("ksearch.kernels.attention")


def test_the_name_reads_back_and_the_dispatch_takes_it_at_d128_only() -> None:
    cfg = WS.parse_config("ws3_n64_s4_p4_tmas_pst_preg32_cr_wt_sn_uw_r1_xa")
    assert cfg.row_sums_once and cfg == A.WIDE_PERSIST and WS.config_name(cfg).endswith("_uw_r1_xa")
    assert WS.kernel_name(cfg).endswith("_r1_xa")
    assert A.WIDE_SECTIONS.row_sums_once and A.WIDE_SPLIT_TAIL.row_sums_once
    assert not A.TALL.row_sums_once and not A.TALL_SECTIONS.row_sums_once and not A.WIDE.row_sums_once
    assert not WS.with_bulk_copies(A.WIDE_PERSIST).row_sums_once  # the bulk fallback: not measured with it


@pytest.mark.parametrize("name", ["ws3_n64_s4_p4_r1", "ws3_n64_s4_p0_r1", "ws3_n64_s4_p4_bulk_cr_r1",
                                  "ws3_n64_s4_p4_tmas_cr_r1", "ws3_n64_s4_p4_tmas_pst_preg32_cr_wt_sn_hs_kt_uw_r1",
                                  "ws2_n128_s3_p4_tmas_pst_sn_r1"])
def test_every_kernel_kind_takes_one_product_a_tile(name: str) -> None:
    text, plain = WS.source_text(WS.parse_config(name)), WS.source_text(WS.parse_config(name[:-3]))
    assert text.count("KsWg<T>::rs8(lacc, psum, d1);") == 1 and "rs8(lacc, p[kk], d1)" not in text
    assert "rs8(lacc, p[kk], d1)" in plain and "psum" not in plain
    # the sums the one product takes: element e of every 16-key block, packed once
    assert "se[e] += s[8 * kk + e];" in text and "psum[c] = ks_pack2<T>(se[2 * c], se[2 * c + 1]);" in text


def accumulator_position(i: int, g: int, tq: int) -> tuple[int, int]:
    """(row, key) of element i of a lane's m64nN accumulator (lane = 4 g + tq of its warp's 16 rows): PTX's layout,
    an 8-column block a group of four, rows g and g + 8."""
    j, e = i >> 2, i & 3
    return g + 8 * (e >> 1), 8 * j + 2 * tq + (e & 1)


def a_fragment_position(c: int, half: int, g: int, tq: int) -> tuple[int, int]:
    """(row, k) of half `half` of register c of a lane's register A fragment of m64nNk16 (16 rows of a warp)."""
    return g + 8 * (c & 1), 8 * (c >> 1) + 2 * tq + half


def summed_row_sums(p: np.ndarray, register_of: Callable[[int], int] = lambda c: c) -> np.ndarray:
    """Each row's sum as `_r1` takes it from one warp's 16 rows of P: the kernel's sums of element e over the 16-key
    blocks (`se`), packed as register c = (se[2 c], se[2 c + 1]), times a 16 x 8 tile of ones (each row's k-sum of
    the fragment); `register_of` places register c in the fragment (the identity: wgmma's layout)."""
    bn = p.shape[1]
    sums = np.zeros(16, dtype=np.float64)
    for lane in range(32):
        g, tq = lane >> 2, lane & 3
        s = [p[accumulator_position(i, g, tq)] for i in range(bn // 2)]
        se = [sum(s[8 * kk + e] for kk in range(bn // 16)) for e in range(8)]
        for c in range(4):
            for half in range(2):
                row, _ = a_fragment_position(register_of(c), half, g, tq)
                sums[row] += se[2 * c + half]
    return sums


@pytest.mark.parametrize("bn", [64, 128])
def test_the_summed_fragment_gives_each_rows_sum(bn: int) -> None:
    p = np.random.default_rng(bn).random((16, bn), dtype=np.float32) * 2.0  # one warp's 16 rows of P
    np.testing.assert_allclose(summed_row_sums(p), p.sum(axis=1, dtype=np.float64), rtol=1e-5)


def test_a_wrong_element_order_fails_that_check() -> None:
    # the check above can fail: a fragment whose registers take rows g and g + 8 the other way round sums wrongly
    p = np.arange(16 * 64, dtype=np.float32).reshape(16, 64)
    assert not np.allclose(summed_row_sums(p, lambda c: c ^ 1), p.sum(axis=1))
