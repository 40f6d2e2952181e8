"""The Mamba model side on mlx-cpu with mistaken input: load, the model call, generate, the KSEARCH_MAMBA_* variables,
the mlx-lm patch and `ksearch bench mamba`. Each mistake is one exception of one line that names the argument
(a CLI mistake: exit 2 and one error line); valid edge cases give the right result."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

mx = pytest.importorskip("mlx.core")
pytest.importorskip("mlx_lm.models.mamba")

from ksearch.errors import ConfigError  # noqa: E402
from ksearch.integrations import mlx_lm as integ  # noqa: E402
from ksearch.models import mamba as M  # noqa: E402
from ksearch.models.generate import generate, generate_step  # noqa: E402

ARGS = M.ModelArgs(vocab_size=61, d_model=32, n_layer=2, d_state=16, dt_rank=4)  # vocabulary padded to 64


@pytest.fixture(scope="module")
def model() -> M.Model:
    mx.set_default_device(mx.cpu)
    return M.random_model(ARGS, seed=7)


def _one_line(kind: type[BaseException], says: str, call: Callable[[], Any]) -> str:
    with pytest.raises(kind, match=says) as caught:
        call()
    text = str(caught.value)
    assert "\n" not in text, text
    return text


# -- generate -----------------------------------------------------------------------------------------------------

BAD_GENERATE: dict[str, tuple[dict[str, Any], type[BaseException], str]] = {
    "empty-list": ({"prompt": []}, ValueError, "prompt is empty"),
    "empty-array": ({"prompt": mx.array([], dtype=mx.int32)}, ValueError, "prompt is empty"),
    "id-past-vocab": ({"prompt": [1, 64, 3]}, ValueError, r"token id 64, outside the model's vocabulary \[0, 64\)"),
    "huge-id-array": ({"prompt": mx.array([1, 2**20])}, ValueError, "token id 1048576, outside"),
    "negative-id": ({"prompt": [3, -1]}, ValueError, "token id -1, outside"),
    "id-past-int32": ({"prompt": [2**40]}, ValueError, "token id 1099511627776, outside"),
    "float-list": ({"prompt": [1.5, 2.0]}, TypeError, "integer token ids, got 1.5"),
    "float-array": ({"prompt": mx.array([1.0, 2.0])}, TypeError, "integer token ids, got mlx.core.float32"),
    "text": ({"prompt": "hello"}, TypeError, "not text: encode it"),
    "list-of-lists": ({"prompt": [[1, 2], [3, 4]]}, ValueError, "list of lists; generate runs one sequence"),
    "2d-array": ({"prompt": mx.array([[1, 2], [3, 4]])}, ValueError, r"shape \(2, 2\); generate runs one sequence"),
    "max-tokens-negative": ({"max_tokens": -1}, ValueError, "max_tokens must be a whole number of 0 or more, got -1"),
    "max-tokens-float": ({"max_tokens": 2.5}, ValueError, "max_tokens .* got 2.5"),
    "temperature-negative": ({"temperature": -1.0}, ValueError, "temperature must be 0 .* got -1.0"),
    "temperature-nan": ({"temperature": math.nan}, ValueError, "temperature .* got nan"),
}


@pytest.mark.parametrize(("change", "kind", "says"), list(BAD_GENERATE.values()), ids=list(BAD_GENERATE))
@pytest.mark.parametrize("compiled", [True, False], ids=["compiled", "eager"])
def test_generate_refuses_a_mistaken_argument_in_one_line(model: M.Model, change: dict[str, Any],
                                                          kind: type[BaseException], says: str,
                                                          compiled: bool) -> None:
    call = {"prompt": [3, 14, 15], "max_tokens": 3, "temperature": 0.0, "compiled": compiled, **change}
    _one_line(kind, says, lambda: generate(model, **call))


def test_generate_step_checks_when_called_not_at_the_first_token(model: M.Model) -> None:
    _one_line(ValueError, "prompt is empty", lambda: generate_step(model, []))
    _one_line(ValueError, "prefill_step must be .* at least 1, got 0", lambda: generate_step(model, [1], prefill_step=0))
    theirs = integ.mlx_lm_model(model)
    _one_line(TypeError, "ksearch.models.mamba.Model, got Model: run mlx-lm's models with mlx_lm.generate",
              lambda: generate_step(theirs, [1]))


def test_generate_edge_cases_that_are_valid(model: M.Model) -> None:
    assert generate(model, [3, 14, 15], max_tokens=0) == []
    five = generate(model, [3, 14, 15], max_tokens=5)
    assert generate(model, (3, 14, 15), max_tokens=2) == five[:2]  # any sequence of ints
    assert generate(model, mx.array([3, 14, 15], dtype=mx.uint32), max_tokens=5) == five
    assert len(generate(model, [63], max_tokens=3)) == 3  # the padded vocabulary's last row is a valid id


# -- the model call -----------------------------------------------------------------------------------------------

def test_model_call_refuses_mistaken_tokens_and_caches_in_one_line(model: M.Model) -> None:
    _one_line(ValueError, r"tokens must be \(batch, L\) token ids, got shape \(3,\): add a batch axis",
              lambda: model(mx.array([1, 2, 3])))
    _one_line(TypeError, "tokens must be integer token ids, got mlx.core.float32",
              lambda: model(mx.array([[1.0, 2.0]])))
    _one_line(ValueError, r"tokens has no positions \(shape \(1, 0\)\)",
              lambda: model(mx.zeros((1, 0), dtype=mx.int32), model.make_cache()))
    cache = model.make_cache()
    model(mx.array([[1, 2, 3]]), cache)
    _one_line(ValueError, "the cache holds batch 1, tokens batch 2: start a new cache",
              lambda: model(mx.array([[1], [2]]), cache))
    _one_line(ValueError, "the cache has 1 layers, the model 2: make it with this model's make_cache",
              lambda: model(mx.array([[1]]), cache[:1]))


# -- load, dtypes, sizes ------------------------------------------------------------------------------------------

def _edit_config(path: Path, **changes: Any) -> None:
    cfg = json.loads((path / "config.json").read_text())
    cfg.update(changes)
    (path / "config.json").write_text(json.dumps({k: v for k, v in cfg.items() if v is not None}))


def test_load_refuses_what_is_no_mamba_1_checkpoint_in_one_line(tmp_path: Path, model: M.Model) -> None:
    good = M.save_checkpoint(model, tmp_path / "good")
    _one_line(FileNotFoundError, "state-spaces/mamba-130m does not exist: .*`huggingface-cli download "
              "state-spaces/mamba-130m --local-dir DIR`", lambda: M.load("state-spaces/mamba-130m"))
    _one_line(FileNotFoundError, "does not exist: .*`huggingface-cli download state-spaces/mamba-130m-hf",
              lambda: M.load(tmp_path / "nowhere"))
    _one_line(NotADirectoryError, "config.json is a file: pass the directory", lambda: M.load(good / "config.json"))
    bad = {
        "llama": ({"model_type": "llama"}, "is a 'llama' checkpoint: .* Mamba-1 .* mlx-lm runs other"),
        "mamba2": ({"model_type": "mamba2"}, "is a 'mamba2' checkpoint"),
        "falcon": ({"model_type": "falcon_mamba"}, "is a 'falcon_mamba' checkpoint"),
        "novocab": ({"vocab_size": None}, "config.json has no vocab_size"),
        "nolayers": ({"num_hidden_layers": None}, "neither n_layer nor num_hidden_layers"),
        "wider": ({"hidden_size": 48}, r"do not fit .* of another shape than config.json gives "
                                       r"\(backbone.embeddings.weight \(64, 32\), not \(64, 48\)"),
    }
    for name, (changes, says) in bad.items():
        path = M.save_checkpoint(model, tmp_path / name)
        _edit_config(path, **changes)
        _one_line(ValueError, says, lambda p=path: M.load(p))
    (tmp_path / "json").mkdir()
    (tmp_path / "json" / "config.json").write_text("{not json")
    _one_line(ValueError, "config.json is not JSON", lambda: M.load(tmp_path / "json"))
    (tmp_path / "json" / "config.json").write_text("[1, 2]")
    _one_line(ValueError, "holds a JSON list, not an object", lambda: M.load(tmp_path / "json"))
    short = M.save_checkpoint(model, tmp_path / "short")
    weights = {k: v for k, v in mx.load(str(short / "model.safetensors")).items() if not k.endswith("1.mixer.D")}
    mx.eval(weights)  # MLX 0.32.0 and older read a loaded file lazily: evaluate before writing over it
    mx.save_safetensors(str(short / "model.safetensors"), weights)
    _one_line(ValueError, r"1 missing \(backbone.layers.1.mixer.D\)", lambda: M.load(short))


def test_dtypes_sizes_and_names_are_checked_in_one_line(tmp_path: Path, model: M.Model) -> None:
    good = M.save_checkpoint(model, tmp_path / "good")
    for dtype in ("float16", mx.int8):
        _one_line(TypeError, "dtype must be a floating mlx dtype", lambda d=dtype: M.load(good, dtype=d))
        _one_line(TypeError, "dtype must be a floating mlx dtype", lambda d=dtype: M.random_model(ARGS, dtype=d))
    assert M.load(good, dtype=mx.bfloat16)[0].backbone.embeddings.weight.dtype == mx.bfloat16
    _one_line(ValueError, "no Mamba config '7b': one of 130m, 370m", lambda: M.config("7b"))
    _one_line(ValueError, "ModelArgs.d_model must be a whole number of at least 1, got 0",
              lambda: M.ModelArgs(d_model=0))
    _one_line(ValueError, "ModelArgs.dt_rank must be", lambda: M.ModelArgs(dt_rank=-1))


# -- KSEARCH_MAMBA_* ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("var", ["KSEARCH_MAMBA_FUSED", "KSEARCH_MAMBA_COMPILE"])
def test_an_env_value_that_is_not_on_or_off_is_one_config_error(monkeypatch: pytest.MonkeyPatch, model: M.Model,
                                                                var: str) -> None:
    monkeypatch.setenv(var, "maybe")
    says = f"{var}='maybe' is not on or off: set it to 1 or 0"
    _one_line(ConfigError, says, lambda: generate_step(model, [1, 2]))
    if var == "KSEARCH_MAMBA_FUSED":
        _one_line(ConfigError, says, lambda: model(mx.array([[1, 2]])))
        _one_line(ConfigError, says, integ.patch)
        assert not integ.is_patched()


@pytest.mark.parametrize(("value", "fused"), [("", False), ("0", False), ("false", False), ("off", False),
                                              ("1", True), (" TRUE ", True)],
                         ids=["unset", "0", "false", "off", "1", "TRUE"])
def test_the_fused_layout_is_what_the_variable_says(monkeypatch: pytest.MonkeyPatch, model: M.Model, value: str,
                                                    fused: bool) -> None:
    # The kernels would read "false" as on themselves: the model hands them its own reading.
    seen: list[Any] = []

    def spy(*args: Any, **kwargs: Any) -> Any:
        seen.append(kwargs.get("fused"))
        return real(*args, **kwargs)

    real = M.mixer_prefill
    monkeypatch.setattr(M, "mixer_prefill", spy)
    monkeypatch.setenv("KSEARCH_MAMBA_FUSED", value)
    model(mx.array([[1, 2, 3]]))
    assert seen == [fused] * ARGS.n_layer


# -- the mlx-lm patch ---------------------------------------------------------------------------------------------

def test_unpatch_without_a_patch_needs_no_mlx_lm(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("mlx_lm", "mlx_lm.models", "mlx_lm.models.mamba"):
        monkeypatch.setitem(sys.modules, name, None)  # an import of mlx-lm fails, as where it is not installed
    integ.unpatch()
    assert not integ.is_patched()


def test_patch_leaves_other_mlx_lm_models_unchanged() -> None:
    from mlx_lm.models import llama

    args = llama.ModelArgs(model_type="llama", hidden_size=32, num_hidden_layers=2, intermediate_size=64,
                           num_attention_heads=4, rms_norm_eps=1e-5, vocab_size=50, num_key_value_heads=2)
    other = llama.Model(args)
    mx.eval(other.parameters())
    tokens = mx.array([[1, 2, 3, 4]])
    before = other(tokens)
    integ.patch()
    try:
        after = other(tokens)
    finally:
        integ.unpatch()
    assert mx.array_equal(before, after)


# -- ksearch bench mamba -------------------------------------------------------------------------------------------

@pytest.mark.parametrize(("extra", "env", "says"), [
    (["--dtype", "int32"], {}, "Invalid value for --dtype: 'int32': one of float16, bfloat16, float32"),
    (["--baseline-max-length", "-1"], {}, "Invalid value for --baseline-max-length: -1: give 0 or more"),
    ([], {"KSEARCH_MAMBA_FUSED": "maybe"}, "KSEARCH_MAMBA_FUSED='maybe' is not on or off"),
], ids=["dtype", "baseline-max-length", "fused-variable"])
def test_bench_mamba_refuses_a_mistake_in_one_line_before_any_work(tmp_path: Path, extra: list[str],
                                                                   env: dict[str, str], says: str) -> None:
    out = tmp_path / "out"
    proc = subprocess.run([sys.executable, "-m", "ksearch.cli", "bench", "mamba", "--no-compare", "--out", str(out),
                           *extra], capture_output=True, text=True, timeout=120, env={**os.environ, **env})
    assert proc.returncode == 2, proc.stdout + proc.stderr[-2000:]
    assert len(proc.stderr.strip().splitlines()) == 1 and says in proc.stderr, proc.stderr
    assert not out.exists()
