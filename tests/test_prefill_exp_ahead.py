"""P's exponentials ahead of the tile's maximum (`_xa`, kernels/attention/wgmma_ws_ahead.py) without a GPU: the name
reads back and is refused where it cannot run, every producer kernel takes the text change (the softmax of each step,
the warpgroup's vote, the tile run again, K's stage handed back after it), the kernels compile for sm_90a without
serialised wgmma or spills, and the rule itself, run on the host: the exact online softmax on any scores, where the
speculative P alone overflows fp16 on scores that keep rising, and how many tiles a warpgroup runs again. Correctness
and speed on the GPU: `KS_CHECK_CONFIGS=...` benchmarks/attention_gpu.py check-prefill, `ksearch bench attention
--configs dispatch+xa`, benchmarks/prefill_item_trace.py `--scores stepped`."""

from __future__ import annotations

import importlib

import numpy as np
import pytest

from ksearch.backends.nvcc import compile_check, nvcc_path
from ksearch.kernels.attention import wgmma_ws as WS
from ksearch.kernels.attention.dispatch_variant import parse_dispatch_variant, variant_config
from ksearch.kernels.attention.wgmma_ws_ahead import exp_ahead

A = importlib.import_module("ksearch.kernels.attention")  # the package, not the function of the same name

KINDS = ["ws3_n64_s4_p4_cr_xa", "ws3_n64_s4_p4_bulk_cr_xa", "ws3_n64_s4_p4_tmas_cr_xa",
         "ws3_n64_s4_p4_tmas_pst_preg32_cr_wt_sn_uw_r1_xa", "ws3_n64_s4_p4_tmas_pst_preg32_cr_wt_sn_hs_kt_uw_r1_xa",
         "ws2_n128_s3_p4_tmas_pst_cr_sn_xa"]


def test_the_name_reads_back_and_the_dispatch_variant_takes_it() -> None:
    cfg = WS.parse_config("ws3_n64_s4_p4_tmas_pst_preg32_cr_wt_sn_uw_r1_xa")
    assert cfg.exp_ahead and WS.config_name(cfg).endswith("_r1_xa") and WS.kernel_name(cfg).endswith("_xa")
    # the dispatch's at D=128 (WIDE_PERSIST and with it `_hs` / `_kt`), not at D=64 (TALL has no `_cr`) nor in WIDE
    assert cfg == A.WIDE_PERSIST and A.WIDE_SECTIONS.exp_ahead and A.WIDE_SPLIT_TAIL.exp_ahead
    assert not A.TALL.exp_ahead and not A.WIDE.exp_ahead
    minus, plus = parse_dispatch_variant("dispatch-xa"), parse_dispatch_variant("dispatch+xa")
    assert variant_config(WS.config_name(A.WIDE_PERSIST), minus) == WS.parse_config(WS.config_name(cfg)[:-3])
    assert variant_config(WS.config_name(A.TALL), plus) is None  # TALL has no `_cr`: MLX stands in there
    assert not WS.with_bulk_copies(cfg).exp_ahead


@pytest.mark.parametrize("name", ["ws3_n64_s4_p4_tmas_xa", "ws3_n64_s4_p0_cr_xa", "ws3_n64_s4_p4_pp_cr_xa",
                                  "ws3_n64_s4_p4_tmas_pst_cr_qt_xa"])
def test_it_is_refused_where_it_cannot_run(name: str) -> None:
    with pytest.raises(ValueError, match="_xa .* needs _cr and a producer"):
        WS.parse_config(name)


def _step_bodies(text: str) -> list[str]:
    starts = [text.index("const int t = t0;"), text.index("const int t = t0 + 1;")]
    return [text[s:text.index("release(vempty, t - 1);", s)] for s in starts]


@pytest.mark.parametrize("name", KINDS)
def test_every_producer_kernel_takes_it(name: str) -> None:
    cfg = WS.parse_config(name)
    text, plain = WS.source_text(cfg), WS.source_text(WS.parse_config(name[:-3]))
    for body, packed in zip(_step_bodies(text), ("pa[1]", "pa[0]"), strict=True):
        order = [body.index(x) for x in ("softmax_ahead(t);", f"issue_sum({packed});", "wg_any(grown, 4 + wg)",
                                         "ks_wg_wait0();", f"if (redo) tile_again(t, {packed});",
                                         "release(kempty, t);")]
        assert order == sorted(order), body  # the vote before the wait, the tile again after it, then K's stage
        assert "softmax(t);" not in body and body.count("release(kempty, t);") == 1
    assert text.count("softmax(0);") == plain.count("softmax(0);") == 1  # an item's first tile: the exact softmax
    assert text.count("release(kempty,") == plain.count("release(kempty,")
    assert "T* Qs = ones + 128 + NT * 4;" in text and "T* Qs = ones + 128;" in plain
    ahead = text[text.index("auto softmax_ahead"):text.index("auto rescale")]
    if cfg.row_sums_once:  # the lane's fp32 sums of P decide, no maxima
        assert "fmaxf" not in ahead and text.count("grown = (se[0] + se[1] + se[4] + se[5] > 256.f) |") == 1
    else:
        assert "mx[(i >> 1) & 1] = fmaxf(mx[(i >> 1) & 1], s[i]);" in ahead and "> 8.f)" in ahead
    assert cfg.smem_bytes(128) - WS.parse_config(name[:-3]).smem_bytes(128) == 8 * 128 * cfg.wg
    # the exact softmax (tile 0, a tile run again) takes a tile's maximum wherever it grew; `_cr`'s keeps it up to 8
    exact = text[text.index("auto softmax = "):text.index("auto softmax_ahead")]
    assert "const bool keep = mx[r] == mrow[r];" in exact and "<= 8.f" not in exact and "<= 8.f" in plain


def test_a_kernel_text_without_the_softmax_is_refused() -> None:
    text = WS.source_text(WS.parse_config("ws3_n64_s4_p4_tmas_cr"))
    with pytest.raises(RuntimeError, match="_xa .*no softmax"):
        exp_ahead(text.replace("auto softmax = [&](int t) {", "auto softmax_ = [&](int t) {"))
    with pytest.raises(RuntimeError, match="_xa .*occurs 0 times"):
        exp_ahead(text.replace("release(kempty, t);\n      softmax(t);", "softmax(t);"))


@pytest.mark.skipif(nvcc_path() is None, reason="nvcc not installed")
def test_the_dispatchs_kernel_with_it_compiles_without_serialising_or_spilling() -> None:
    from prefill_units import tensor_copy_unit

    from ksearch.kernels import tensor_map
    from ksearch.kernels.cuda_headers import WGMMA_HEADER
    from ksearch.knowledge.resources import parse_ptxas

    name = "ws3_n64_s4_p4_tmas_pst_preg32_cr_wt_sn_uw_r1_xa"
    cases = [(128, False, "float16"), (128, True, "float16"), (128, False, "bfloat16"), (64, True, "bfloat16")]
    units = [tensor_copy_unit(f"xa{i}_{d}", WS.parse_config(name), d, causal, dt)
             for i, (d, causal, dt) in enumerate(cases)]
    ok, log = compile_check([WGMMA_HEADER, tensor_map.TMA_HEADER, *units])
    assert ok, log[-3000:]
    # C7511: too few registers for the wgmma pipeline (two more floats held through the softmax did that);
    # C7513 / C7514: registers of an in-flight wgmma touched. Any C751x: ptxas serialised every wgmma of the kernel.
    assert "C751" not in log, log[-3000:]
    spills = {r.kernel: r.spill_store_bytes for r in parse_ptxas(log)}
    assert len(spills) == len(cases) and not any(spills.values()), spills


def lane_sums(p: np.ndarray) -> list[float]:
    """A 64-key tile's P of one row as `_r1` sums it on each of the row's four lanes: lane tq holds keys
    8 j + 2 tq and 8 j + 2 tq + 1 of every 8-key group j."""
    return [float(p.reshape(8, 4, 2)[:, tq].sum()) for tq in range(4)]


def run_row(s: np.ndarray, v: np.ndarray, ahead: bool, again: bool = True, vote: str = "max") -> tuple[np.ndarray, int]:
    """One query row through the tile loop as the kernels run it, scores `s` already in exp2's units, 64 keys a tile,
    P rounded to fp16: `_cr`'s exact softmax (keep the maximum while a tile grows it by at most 8), or with `ahead`
    `_xa`'s (P on the maximum before the tile; the tile again, exactly and with its own maximum, where `again` and the
    vote says a row grew: `max`, its maximum past 8; `sum`, as with `_r1`, a lane's sum of its P past 2^8). Returns the
    normalised output and how many tiles ran again."""
    m, l_sum, o, runs = -np.inf, 0.0, np.zeros(v.shape[1]), 0
    with np.errstate(over="ignore", invalid="ignore"):
        for t in range(0, len(s), 64):
            st, vt = s[t:t + 64], v[t:t + 64]
            if ahead and t:
                p32 = np.exp2(st - m)
                p = p32.astype(np.float16).astype(np.float64)
                grown = st.max() - m > 8 if vote == "max" else max(lane_sums(p32)) > 256
                if not (again and grown):
                    l_sum, o = l_sum + p.sum(), o + p @ vt
                    continue
                runs += 1
            mx = max(m, st.max())
            if t and mx - m <= 8 and not ahead:
                mx = m
            corr = np.exp2(m - mx) if t else 0.0
            p = np.exp2(st - mx).astype(np.float16).astype(np.float64)
            m, l_sum, o = mx, corr * l_sum + p.sum(), corr * o + p @ vt
    return o / l_sum, runs


def test_the_rule_gives_the_exact_softmax_on_any_scores() -> None:
    rng = np.random.default_rng(0)
    v = rng.standard_normal((512, 16))
    flat = rng.standard_normal(512) * 1.4  # ordinary scores: no tile after the first grows its row by 8
    rising = flat + np.repeat(np.arange(8) * 12.0, 64)  # each tile 12 more: past 8, and P past fp16's 65504
    for s, tiles_again in ((flat, 0), (rising, 7)):
        exact, _ = run_row(s, v, ahead=False)
        for vote in ("max", "sum"):
            got, again = run_row(s, v, ahead=True, vote=vote)
            assert again == tiles_again and np.array_equal(got, exact)
        ref = np.exp2(s - s.max()) @ v / np.exp2(s - s.max()).sum()
        np.testing.assert_allclose(got, ref, atol=2e-3)
    # a row grown by 6 after its first tile: the sums' vote (lanes' sums near 2^10) runs again the one tile the
    # maxima's keeps, which takes the new maximum, so the tiles after it pass
    mild = rng.standard_normal(512) * 0.1 + np.repeat([0.0] + [6.0] * 7, 64)
    exact, _ = run_row(mild, v, ahead=False)
    (by_max, kept), (by_sum, rerun) = run_row(mild, v, True, vote="max"), run_row(mild, v, True, vote="sum")
    assert (kept, rerun) == (0, 1)
    np.testing.assert_array_equal(by_max, exact)  # kept tiles: P on the old maximum, `_cr`'s very arithmetic
    ref = np.exp2(mild - mild.max()) @ v / np.exp2(mild - mild.max()).sum()
    np.testing.assert_allclose(by_sum, ref, atol=2e-3)
    # without running those tiles again the speculative P overflows fp16 and the row is lost: the check can fail
    lost, _ = run_row(rising, v, ahead=True, again=False)
    assert not np.isfinite(lost).all()


def tiles_run_again(s: np.ndarray, taken: bool = True, headroom: float = 0.0) -> float:
    """The share of a warpgroup's tiles after its first that `_xa` (with `_r1`'s sums) runs again on scores `s` (rows
    x keys, exp2's units, 64 rows a warpgroup): any of its rows with a lane's sum of its 16 P values past 2^8. The tile
    run again takes each row's new maximum (`taken`, the kernel's rule; plus `headroom`, an idea not built) or `_cr`'s
    (kept while it grew by at most 8)."""
    tiles = s.reshape(s.shape[0], -1, 64)
    m, again = tiles[:, 0].max(axis=1), 0
    for t in range(1, tiles.shape[1]):
        lanes = np.exp2(tiles[:, t] - m[:, None]).reshape(-1, 8, 4, 2).sum(axis=(1, 3))
        redo = (lanes > 256).any(axis=1).reshape(-1, 64).any(axis=1)
        tmax = tiles[:, t].max(axis=1)
        m = np.where(np.repeat(redo, 64) & (tmax - m > (0 if taken else 8)), np.maximum(tmax + headroom, m), m)
        again += int(redo.sum())
    return again / (tiles.shape[0] // 64 * (tiles.shape[1] - 1))


def test_ordinary_scores_run_few_tiles_again_a_row_stepped_up_one_rising_ones_most() -> None:
    rng = np.random.default_rng(1)
    # Gaussian scores (the benchmark's spread is 1.4 units of exp2): none up to 2 units, 9% at 4 with `_cr`'s
    # maximum in the tile run again, 2% with the tile's own
    gauss = {sd: rng.standard_normal((256, 8192)) * sd for sd in (1.4, 2.0, 4.0, 8.0)}
    rates = {sd: (tiles_run_again(s, taken=False), tiles_run_again(s)) for sd, s in gauss.items()}
    assert rates[1.4] == rates[2.0] == (0, 0), rates
    assert 0.05 < rates[4.0][0] < 0.15 and 0.01 < rates[4.0][1] < 0.04, rates
    assert rates[8.0][1] < rates[8.0][0] < 0.4, rates
    # every row's later scores 5-7 units above its first two tiles' (bench.attention's `stepped`): with `_cr`'s
    # maximum 67-99% of the tiles run again, with the tile's own the one tile where the step is (1 of 127)
    for step in (5.0, 6.0, 7.0):
        stepped = rng.standard_normal((256, 8192)) * 1.4 + np.where(np.arange(8192) >= 128, step, 0.0)
        assert tiles_run_again(stepped, taken=False) > 0.6 and tiles_run_again(stepped) == 1 / 127
    # scores rising about 8 a tile (bench.attention's `rising`, the worst case measured): every tile either way
    rising = rng.standard_normal((64, 8192)) * 1.4 + np.repeat(np.arange(128) * 8.0, 64)
    assert tiles_run_again(rising) > 0.9
    # a maximum taken 2^4 above the tile's (docs: Limits, not built) would run every other one again
    assert 0.45 < tiles_run_again(rising, headroom=4.0) < 0.55
