"""Text generation with a Mamba model (models/mamba.py): the `mx.compile`d runner (models/mamba_compiled.py) by
default, the eager model on request. It sits above both, so that neither the model nor the runner imports the other
the wrong way.

    from ksearch.models import mamba
    from ksearch.models.generate import generate

    model, args = mamba.load("path/to/mamba-370m")
    print(generate(model, tokens, max_tokens=32))

The arguments are checked once, before anything runs (ValueError / TypeError, one line): the prompt is one
non-empty sequence of integer ids inside the model's vocabulary (an id outside it would read past the embedding
table), max_tokens a whole number >= 0, temperature a finite number >= 0. Nothing is checked per token.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from numbers import Integral, Real
from typing import cast

import mlx.core as mx

from ksearch.models.mamba import Model, fused_from_env
from ksearch.models.mamba_compiled import CompiledMamba, use_compiled

ONE_SEQUENCE = "generate runs one sequence: pass one prompt, or call the model with a make_cache() cache for a batch"
EMPTY = "prompt is empty: pass at least one token id (a BOS token, for instance)"


def _outside(token: int, vocab_size: int) -> ValueError:
    return ValueError(f"prompt holds token id {token}, outside the model's vocabulary [0, {vocab_size}): was it "
                      "encoded with this model's tokenizer?")


def prompt_ids(prompt: Sequence[int] | mx.array, vocab_size: int) -> mx.array:
    """The prompt as a 1-D integer array, refused in one line where it is not token ids of this vocabulary."""
    if isinstance(prompt, str | bytes):
        raise TypeError("prompt must be token ids, not text: encode it with the model's tokenizer first")
    if not isinstance(prompt, mx.array):
        items = list(prompt)
        odd = next((t for t in items if not isinstance(t, Integral) or isinstance(t, bool)), None)
        if isinstance(odd, list | tuple):
            raise ValueError(f"prompt must be one list of token ids, got a list of lists; {ONE_SEQUENCE}")
        if odd is not None:
            raise TypeError(f"prompt must be integer token ids, got {odd!r} ({type(odd).__name__})")
        if not items:
            raise ValueError(EMPTY)
        # Checked before the conversion to int32, where an id past 2**31 would wrap around.
        bad = next((t for t in items if not 0 <= t < vocab_size), None)
        if bad is not None:
            raise _outside(int(bad), vocab_size)
        return mx.array([int(t) for t in items], dtype=mx.int32)
    if prompt.ndim != 1:
        raise ValueError(f"prompt must be 1-D token ids, got shape {tuple(prompt.shape)}; {ONE_SEQUENCE}")
    if not mx.issubdtype(prompt.dtype, mx.integer):
        raise TypeError(f"prompt must be integer token ids, got {prompt.dtype}")
    if prompt.size == 0:
        raise ValueError(EMPTY)
    low, high = (int(cast(int, v.item())) for v in (prompt.min(), prompt.max()))  # one device read per generation
    if low < 0 or high >= vocab_size:
        raise _outside(low if low < 0 else high, vocab_size)
    return prompt


def _check_sampling(model: Model, temperature: float, prefill_step: int) -> None:
    if not isinstance(model, Model):
        raise TypeError(f"model must be a ksearch.models.mamba.Model, got {type(model).__name__}: run mlx-lm's "
                        "models with mlx_lm.generate (ksearch.integrations.mlx_lm.patch() puts them on our kernels)")
    if not isinstance(temperature, Real) or not math.isfinite(temperature) or temperature < 0:
        raise ValueError(f"temperature must be 0 (greedy) or a positive number, got {temperature!r}")
    if not isinstance(prefill_step, Integral) or isinstance(prefill_step, bool) or prefill_step < 1:
        raise ValueError(f"prefill_step must be a whole number of at least 1, got {prefill_step!r}")


def generate_step(model: Model, prompt: Sequence[int] | mx.array, temperature: float = 0.0,
                  prefill_step: int = 2048, compiled: bool | None = None) -> Iterator[int]:
    """Token ids after prompt (1-D token ids): greedy at temperature 0, else sampled. Prefill runs in chunks.
    Compiled (mamba_compiled.py) unless compiled=False or KSEARCH_MAMBA_COMPILE=0. The arguments (and the
    KSEARCH_MAMBA_* variables) are checked here, when it is called, not at the first token."""
    _check_sampling(model, temperature, prefill_step)
    ids = prompt_ids(prompt, model.args.vocab_size)
    runner = CompiledMamba(model) if use_compiled(compiled) else None
    fused_from_env()
    return _tokens(model, ids[None], runner, temperature, prefill_step)


def _tokens(model: Model, tokens: mx.array, runner: CompiledMamba | None, temperature: float,
            prefill_step: int) -> Iterator[int]:
    cache = model.make_cache()

    def step(t: mx.array) -> mx.array:
        return runner(t) if runner is not None else model(t, cache)[:, -1]

    for s in range(0, tokens.shape[1] - 1, prefill_step):
        last = step(tokens[:, s:min(s + prefill_step, tokens.shape[1] - 1)])
        mx.eval(last, runner.states if runner is not None else [c for layer in cache for c in layer])
    logits = step(tokens[:, -1:])

    def pick(lg: mx.array) -> mx.array:
        if temperature <= 0:
            return mx.argmax(lg, axis=-1)
        return mx.random.categorical(lg * (1.0 / temperature))

    y = pick(logits)
    mx.async_eval(y)
    while True:
        # Queue the next step before reading this token, so the GPU never waits on Python.
        next_y = pick(step(y[:, None]))
        mx.async_eval(next_y)
        yield int(cast(int, y.item()))
        y = next_y


def generate(model: Model, prompt: Sequence[int] | mx.array, max_tokens: int = 32, temperature: float = 0.0,
             seed: int | None = None, compiled: bool | None = None) -> list[int]:
    """max_tokens token ids after prompt (greedy at temperature 0; `seed` makes sampling repeatable)."""
    if not isinstance(max_tokens, Integral) or isinstance(max_tokens, bool) or max_tokens < 0:
        raise ValueError(f"max_tokens must be a whole number of 0 or more, got {max_tokens!r}")
    steps = generate_step(model, prompt, temperature, compiled=compiled)
    if max_tokens == 0:
        return []
    if seed is not None:
        mx.random.seed(seed)
    out: list[int] = []
    for tok in steps:
        out.append(tok)
        if len(out) >= max_tokens:
            break
    return out


__all__ = ["generate", "generate_step", "prompt_ids"]
