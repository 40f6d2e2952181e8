"""`_gp`: without the mask the query heads that share a K / V head go into the prefill kernel as one run of rows of
that head. Checked here on the host side (the kernel itself is the same text; the GPU check runs it): the rows the
kernel gets, the output put back in place against MLX's attention, and where it does not apply."""

from __future__ import annotations

from typing import Any

import pytest

from ksearch.kernels.attention import WIDE_PERSIST, native_attention
from ksearch.kernels.attention import wgmma_ws as WS
from ksearch.kernels.attention.cuda_prefill import blocks_for

mx = pytest.importorskip("mlx.core")

GROUPED = WS.parse_config(WS.config_name(WIDE_PERSIST) + "_gp")


def _inputs(hq: int, hkv: int, length: int = 128, d: int = 64) -> tuple[Any, Any, Any]:
    mx.random.seed(3)
    q = mx.random.normal((2, hq, length, d)).astype(mx.float16)
    k = mx.random.normal((2, hkv, length, d)).astype(mx.float16)
    v = mx.random.normal((2, hkv, length, d)).astype(mx.float16)
    return q, k, v


@pytest.fixture()
def kernel_calls(monkeypatch: pytest.MonkeyPatch) -> list[tuple[tuple[int, ...], bool]]:
    """The tensor-copy kernel replaced by MLX's attention on what it is given (no CUDA here): each call's q shape."""
    calls: list[tuple[tuple[int, ...], bool]] = []

    def stand_in(q: Any, k: Any, v: Any, causal: bool, cfg: WS.WsConfig) -> Any:
        calls.append((tuple(q.shape), causal))
        return native_attention(q, k, v, causal)

    monkeypatch.setattr(WS, "_attention_tma", stand_in)
    return calls


def test_the_name_reads_back() -> None:
    assert GROUPED.grouped and WS.config_name(GROUPED).endswith("_uw_r1_xa_gp")
    assert WS.parse_config(WS.config_name(GROUPED)) == GROUPED
    assert WS.kernel_name(GROUPED) == WS.kernel_name(WIDE_PERSIST)  # the same kernel text
    with pytest.raises(ValueError, match="_gp"):
        WS.parse_config("ws3_n64_s4_p4_tmas_gp_uw")  # out of order: the message lists the order


def test_a_k_v_heads_query_heads_go_in_as_one_run_of_rows(kernel_calls: list[Any]) -> None:
    q, k, v = _inputs(hq=8, hkv=2)
    out = WS.attention_wgmma_ws(q, k, v, False, GROUPED)
    assert kernel_calls == [((2, 2, 4 * 128, 64), False)]
    assert out.shape == q.shape
    want = native_attention(q, k, v, False)
    assert mx.allclose(out.astype(mx.float32), want.astype(mx.float32), atol=2e-3).item()


@pytest.mark.parametrize(("hq", "causal"), [(8, True), (2, False)], ids=["mask", "one-query-head-a-k-v-head"])
def test_with_the_mask_or_without_groups_the_rows_stay(kernel_calls: list[Any], hq: int, causal: bool) -> None:
    q, k, v = _inputs(hq=hq, hkv=2)
    out = WS.attention_wgmma_ws(q, k, v, causal, GROUPED)
    assert kernel_calls == [(tuple(q.shape), causal)]
    assert mx.allclose(out.astype(mx.float32), native_attention(q, k, v, causal).astype(mx.float32), atol=2e-3).item()


def test_fewer_items_at_192_rows() -> None:
    # one partial item a K / V head instead of one a query head (B 1, Hq 32, Hkv 8, L=4096)
    assert blocks_for((1, 32, 4096, 128), 192) == 32 * 22
    assert blocks_for((1, 8, 4 * 4096, 128), 192) == 8 * 86
