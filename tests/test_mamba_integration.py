"""ksearch.integrations.mlx_lm on mlx-cpu (ops path): patched mlx-lm Mamba equals mlx-lm's own."""

from __future__ import annotations

import pytest

mx = pytest.importorskip("mlx.core")
pytest.importorskip("mlx_lm.models.mamba")

from ksearch.integrations import mlx_lm as integ  # noqa: E402
from ksearch.models import mamba as M  # noqa: E402


def _run(model, tokens, steps: int = 5):
    cache = model.make_cache()
    outs = [model(tokens, cache)]
    tok = mx.argmax(outs[-1][:, -1], axis=-1)
    for _ in range(steps):
        outs.append(model(tok[:, None], cache))
        tok = mx.argmax(outs[-1][:, -1], axis=-1)
    return outs


def test_patch_matches_unpatched_within_task_tolerance() -> None:
    mx.set_default_device(mx.cpu)
    theirs = integ.mlx_lm_model(M.random_model(M.ModelArgs(vocab_size=40, d_model=32, n_layer=2, dt_rank=4), seed=3))
    tokens = mx.array([[1, 7, 3, 9, 2, 8, 5]])
    ref = _run(theirs, tokens)
    integ.patch()
    integ.patch()  # idempotent
    try:
        assert integ.is_patched()
        got = _run(theirs, tokens)
    finally:
        integ.unpatch()
    assert not integ.is_patched()
    for g, r in zip(got, ref, strict=True):
        assert mx.allclose(g, r, atol=1e-4, rtol=1e-4)
    again = _run(theirs, tokens)
    for g, r in zip(again, ref, strict=True):
        assert mx.allclose(g, r, atol=0, rtol=0)
