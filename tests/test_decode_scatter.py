"""The split-K decode's reduce-scatter step (cuda_split_k_text.STEP_MATH_SCATTER, `DecodeConfig(scatter=True)`), lane
by lane: a model of the CUDA text's shuffles over the LPK lanes of one key must leave every lane the same running max,
sum and accumulators (its own 8 columns) as a plain online softmax over the same keys, masked keys included."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from ksearch.kernels.decode import cuda_split_k
from ksearch.kernels.decode.cuda_split_k import DecodeConfig


def scatter_step(state: dict[str, np.ndarray], q: np.ndarray, k: np.ndarray, v: np.ndarray, valid: np.ndarray,
                 u_steps: int, lanes: int) -> None:
    """One step as STEP_MATH_SCATTER computes it, for lanes 0..lanes-1 of one key group; q (G, D), k / v (U, D)."""
    g_heads = q.shape[0]
    n = u_steps * g_heads
    c_per = n // lanes
    # each lane's partial dot products over its 8 columns, flat g U + u
    s = [[float(q[f // u_steps, p * 8:p * 8 + 8] @ k[f % u_steps, p * 8:p * 8 + 8]) for f in range(n)]
         for p in range(lanes)]
    off, c = lanes // 2, n
    while off > 0:  # the reduce-scatter, with __shfl_xor_sync(send, off) taken from the partner lane
        sent = [[(s[p][i] if p & off else s[p][c // 2 + i]) for i in range(c // 2)] for p in range(lanes)]
        s = [[(s[p][c // 2 + i] if p & off else s[p][i]) + sent[p ^ off][i] for i in range(c // 2)] + s[p][c // 2:]
             for p in range(lanes)]
        off, c = off // 2, c // 2
    m, l_, acc = state["m"], state["l"], state["acc"]
    hmax, gq = [], []
    for p in range(lanes):
        head, u0 = c_per * p // u_steps, c_per * p % u_steps
        gq.append(head)
        for j in range(c_per):
            if not valid[u0 + j]:
                s[p][j] = -np.inf
        hmax.append(max(s[p][:c_per]))
    width = u_steps // c_per
    off = 1
    while off < width:  # the max over a head's lanes
        hmax = [max(hmax[p], hmax[p ^ off]) for p in range(lanes)]
        off *= 2
    mnew = [max(m[p][gq[p]], hmax[p]) for p in range(lanes)]
    pc = [[2.0 ** (s[p][j] - mnew[p]) for j in range(c_per)] for p in range(lanes)]
    for p in range(lanes):
        for g in range(g_heads):
            mn = mnew[g * width]  # __shfl_sync(mnew, seg + g * (U / C))
            corr = 2.0 ** (m[p][g] - mn)
            m[p][g] = mn
            l_[p][g] = l_[p][g] * corr + (sum(pc[p]) if g == gq[p] else 0.0)
            acc[p][g] *= corr
        for u in range(u_steps):
            for g in range(g_heads):
                f = g * u_steps + u
                acc[p][g] += pc[f // c_per][f % c_per] * v[u, p * 8:p * 8 + 8]


@pytest.mark.parametrize(("u_steps", "g_heads", "d"), [(4, 4, 128), (4, 8, 128), (2, 8, 128), (4, 4, 64),
                                                        (4, 8, 64), (2, 4, 64)])
def test_every_lane_ends_with_the_online_softmax_of_its_keys(u_steps: int, g_heads: int, d: int) -> None:
    lanes = d // 8
    rng = np.random.default_rng(u_steps * 100 + g_heads * 10 + d)
    steps = 5
    q = rng.normal(size=(g_heads, d))
    k = rng.normal(size=(steps, u_steps, d)) * 0.5
    v = rng.normal(size=(steps, u_steps, d))
    valid = np.ones((steps, u_steps), dtype=bool)
    valid[-1, u_steps // 2:] = False  # the last step runs past the split's end
    state = {"m": np.full((lanes, g_heads), -1e30), "l": np.zeros((lanes, g_heads)),
             "acc": np.zeros((lanes, g_heads, 8))}
    for t in range(steps):
        scatter_step(state, q, k[t], v[t], valid[t], u_steps, lanes)
    l_total = state["l"].sum(axis=0)  # SCATTER_SUM: the key's lanes add up their shares
    keys, vals = k[valid], v[valid]
    scores = q @ keys.T  # (G, keys), in the exp2 domain as the kernel's pre-scaled q makes them
    m_ref = scores.max(axis=1)
    p_ref = 2.0 ** (scores - m_ref[:, None])
    for lane in range(lanes):
        assert np.allclose(state["m"][lane], m_ref)
        assert np.allclose(state["acc"][lane], (p_ref @ vals)[:, lane * 8:lane * 8 + 8])
    assert np.allclose(l_total, p_ref.sum(axis=1))
    # and the shuffles the model counts: U G (1 - 1 / LPK) for the reduce-scatter, G + U G for the broadcasts
    assert u_steps * g_heads % lanes == 0


def test_a_shape_the_scatter_cannot_take_is_refused_in_one_line() -> None:
    mx = pytest.importorskip("mlx.core")
    with pytest.raises(ValueError, match="scatter=0"):  # U 4 x G 1 = 4 values over a key's 16 lanes
        cuda_split_k._launch(1, 8, 8, 128, mx.float16, DecodeConfig(scatter=True))
    with pytest.raises(ValueError, match="fused=0"):
        cuda_split_k._launch(1, 32, 8, 128, mx.float16, DecodeConfig(scatter=True, fused=True))
    assert cuda_split_k._launch(1, 32, 8, 128, mx.float16, DecodeConfig(scatter=True)).g == 4
    assert DecodeConfig.parse("scatter=1,unroll=2") == DecodeConfig(scatter=True, unroll=2)


def test_scatter_sources_differ_from_the_butterfly_only_in_the_step() -> None:
    from ksearch.kernels.decode import cuda_split_k_text as text

    for plain, scatter in ((text.SPLIT_SOURCE, text.SPLIT_SCATTER_SOURCE),
                           (text.SPLIT_RING_SOURCE, text.SPLIT_RING_SCATTER_SOURCE)):
        assert text.STEP_MATH in plain and text.STEP_MATH not in scatter
        assert scatter.replace(text.STEP_MATH_SCATTER, text.STEP_MATH).replace(text.SCATTER_SUM, "") == plain
    assert [cuda_split_k.split_source(DecodeConfig(scatter=s, ring=r)) for s, r in itertools.product((0, 1), (0, 2))] \
        == [text.SPLIT_SOURCE, text.SPLIT_RING_SOURCE, text.SPLIT_SCATTER_SOURCE, text.SPLIT_RING_SCATTER_SOURCE]
