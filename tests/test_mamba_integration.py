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


def _fake_mlx_lm(monkeypatch: pytest.MonkeyPatch, block: type | None) -> None:
    """mlx_lm.models.mamba as `block` would make it; None: mlx-lm absent (an import of it fails)."""
    import sys
    import types

    for name in ("mlx_lm", "mlx_lm.models", "mlx_lm.models.mamba"):
        monkeypatch.setitem(sys.modules, name, None if block is None else types.ModuleType(name))
    if block is not None:
        sys.modules["mlx_lm.models.mamba"].MambaBlock = block  # type: ignore[attr-defined]
        sys.modules["mlx_lm.models"].mamba = sys.modules["mlx_lm.models.mamba"]  # type: ignore[attr-defined]


OLD_BLOCK = type("MambaBlock", (), {"__call__": lambda self, x: x})  # no _process_sequence


@pytest.mark.parametrize(("block", "says"), [(OLD_BLOCK, "0.21.2 and later"), (None, "mlx-lm is not installed")])
def test_patch_refuses_an_mlx_lm_it_cannot_patch_in_one_line(monkeypatch: pytest.MonkeyPatch, block: type | None,
                                                             says: str) -> None:
    # mlx-lm 0.21.1 and older run the sequence in MambaBlock.__call__: there is no _process_sequence to replace
    from ksearch.errors import IntegrationError

    _fake_mlx_lm(monkeypatch, block)
    with pytest.raises(IntegrationError, match=says) as caught:
        integ.patch()
    assert "pip install" in str(caught.value) and "\n" not in str(caught.value)
    assert not integ.is_patched()
