"""ksearch.models.mamba on mlx-cpu: checkpoints in both namings, logits equal to mlx-lm's Mamba on the same weights."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

mx = pytest.importorskip("mlx.core")
mamba_lm = pytest.importorskip("mlx_lm.models.mamba")

from ksearch.integrations.mlx_lm import mlx_lm_model  # noqa: E402
from ksearch.models import mamba as M  # noqa: E402
from ksearch.models.generate import generate  # noqa: E402

ARGS = M.ModelArgs(vocab_size=61, d_model=32, n_layer=2, d_state=16, dt_rank=4)


@pytest.fixture(scope="module")
def model() -> M.Model:
    mx.set_default_device(mx.cpu)
    return M.random_model(ARGS, seed=7)


@pytest.mark.parametrize("naming", ["hf", "original"])
def test_checkpoint_roundtrip_and_config(tmp_path: Path, model: M.Model, naming: str) -> None:
    path = M.save_checkpoint(model, tmp_path / naming, naming)
    cfg = json.loads((path / "config.json").read_text())
    assert ("d_model" in cfg) == (naming == "original")
    loaded, args = M.load(path)
    assert args.vocab_size == 64 and args.d_inner == 64 and args.dt_rank == 4
    tokens = mx.array([[1, 2, 3, 4, 5]])
    assert float(mx.max(mx.abs(loaded(tokens) - model(tokens)))) == 0.0


def test_mlx_community_layout_conv_weight(tmp_path: Path, model: M.Model) -> None:
    path = M.save_checkpoint(model, tmp_path / "c", "hf")
    w = mx.load(str(path / "model.safetensors"))
    w = {k: (v.swapaxes(1, 2) if k.endswith("conv1d.weight") else v) for k, v in w.items()}  # MLX (D, K, 1)
    mx.eval(w)  # MLX 0.32.0 and older read a loaded file lazily: writing over it first saves what it overwrote
    mx.save_safetensors(str(path / "model.safetensors"), w)
    loaded, _ = M.load(path)
    tokens = mx.array([[3, 1, 4, 1, 5]])
    assert float(mx.max(mx.abs(loaded(tokens) - model(tokens)))) == 0.0


def test_logits_match_mlx_lm_prefill_and_20_decode_steps(tmp_path: Path, model: M.Model) -> None:
    ours, _ = M.load(M.save_checkpoint(model, tmp_path / "o", "original"))
    theirs = mlx_lm_model(ours)
    tokens = mx.array([[5, 9, 2, 33, 7, 1, 60, 12, 8, 4, 4, 17], [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12]])
    c1, c2 = ours.make_cache(), theirs.make_cache()
    a, b = ours(tokens, c1), theirs(tokens, c2)
    assert a.shape == (2, 12, 64)
    assert mx.allclose(a, b, atol=1e-4, rtol=1e-4)
    tok = mx.argmax(a[:, -1], axis=-1)
    for _ in range(20):
        a, b = ours(tok[:, None], c1), theirs(tok[:, None], c2)
        assert mx.allclose(a, b, atol=1e-4, rtol=1e-4)
        tok = mx.argmax(a[:, -1], axis=-1)


def test_chunked_prefill_equals_one_prefill(model: M.Model) -> None:
    tokens = mx.array([[5, 9, 2, 33, 7, 1, 60, 12, 8]])
    whole = model(tokens)
    cache = model.make_cache()
    parts = [model(tokens[:, :2], cache), model(tokens[:, 2:3], cache), model(tokens[:, 3:], cache)]
    assert mx.allclose(mx.concatenate(parts, axis=1), whole, atol=1e-5, rtol=1e-5)


def test_generation_greedy_matches_mlx_lm_and_sampling_is_seeded(model: M.Model) -> None:
    theirs = mlx_lm_model(model)
    prompt = [3, 14, 15, 9]
    ours = generate(model, prompt, max_tokens=6)
    cache = theirs.make_cache()
    logits = theirs(mx.array([prompt]), cache)
    ref = []
    for _ in range(6):
        tok = int(mx.argmax(logits[0, -1]).item())
        ref.append(tok)
        logits = theirs(mx.array([[tok]]), cache)
    assert ours == ref
    s1 = generate(model, prompt, max_tokens=6, temperature=0.8, seed=1)
    s2 = generate(model, prompt, max_tokens=6, temperature=0.8, seed=1)
    assert s1 == s2 and all(0 <= t < 64 for t in s1)


def test_from_config_both_namings() -> None:
    orig = M.ModelArgs.from_config({"d_model": 1024, "n_layer": 48, "vocab_size": 50277, "ssm_cfg": {}})
    hf = M.ModelArgs.from_config({"hidden_size": 1024, "num_hidden_layers": 48, "vocab_size": 50280,
                                  "state_size": 16, "conv_kernel": 4, "intermediate_size": 2048,
                                  "time_step_rank": 64, "layer_norm_epsilon": 1e-5})
    fields = ("vocab_size", "d_model", "n_layer", "d_state", "d_conv", "expand", "dt_rank", "rms_norm_eps")
    for f in fields:
        assert getattr(orig, f) == getattr(hf, f) == getattr(M.config("370m"), f), f
    with pytest.raises(ValueError):
        M.ModelArgs.from_config({"vocab_size": 10})


def test_fp16_cast_keeps_scan_parameters_in_float32(model: M.Model) -> None:
    m16 = M.random_model(ARGS, seed=7, dtype=mx.float16)
    mixer = m16.backbone.layers[0].mixer
    assert mixer.A_log.dtype == mx.float32 and mixer.D.dtype == mx.float32
    assert mixer.in_proj.weight.dtype == mx.float16
    out = m16(mx.array([[1, 2, 3]]))
    assert out.dtype == mx.float16 and not bool(mx.any(mx.isnan(out)))


def test_compiled_runner_equals_eager_model_and_resets(model: M.Model) -> None:
    from ksearch.models.mamba_compiled import CompiledMamba

    tokens = mx.array([[5, 9, 2, 33, 7, 1, 60, 12, 8, 4, 4]])
    ref = model(tokens)
    runner = CompiledMamba(model)
    got = [runner(tokens[:, :5]), runner(tokens[:, 5:6]), runner(tokens[:, 6:7]), runner(tokens[:, 7:])]
    for g, pos in zip(got, (4, 5, 6, 10), strict=True):
        assert mx.allclose(g, ref[:, pos], atol=1e-5, rtol=1e-5), pos
    runner.reset()  # a new sequence: the same first logits again, from the kept trace
    assert mx.allclose(runner(tokens[:, :5]), got[0], atol=1e-6, rtol=1e-6)
    with pytest.raises(ValueError, match="batch=1"):
        runner(tokens[0])


def test_generation_compiled_equals_eager(model: M.Model) -> None:
    prompt = [3, 14, 15, 9, 2, 6]
    assert generate(model, prompt, max_tokens=8, compiled=True) == generate(model, prompt, max_tokens=8,
                                                                                 compiled=False)
