"""Text generation with a Mamba model (models/mamba.py): the `mx.compile`d runner (models/mamba_compiled.py) by
default, the eager model on request. It sits above both, so that neither the model nor the runner imports the other
the wrong way.

    from ksearch.models import mamba
    from ksearch.models.generate import generate

    model, args = mamba.load("path/to/mamba-370m")
    print(generate(model, tokens, max_tokens=32))
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import cast

import mlx.core as mx

from ksearch.models.mamba import Model
from ksearch.models.mamba_compiled import CompiledMamba, use_compiled


def generate_step(model: Model, prompt: mx.array, temperature: float = 0.0,
                  prefill_step: int = 2048, compiled: bool | None = None) -> Iterator[int]:
    """Token ids after prompt (1-D int array): greedy at temperature 0, else sampled. Prefill runs in chunks.
    Compiled (mamba_compiled.py) unless compiled=False or KSEARCH_MAMBA_COMPILE=0."""
    tokens = prompt[None]
    runner = CompiledMamba(model) if use_compiled(compiled) else None
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


def generate(model: Model, prompt: list[int] | mx.array, max_tokens: int = 32, temperature: float = 0.0,
             seed: int | None = None, compiled: bool | None = None) -> list[int]:
    if seed is not None:
        mx.random.seed(seed)
    ids = prompt if isinstance(prompt, mx.array) else mx.array(prompt, dtype=mx.int32)
    out: list[int] = []
    for tok in generate_step(model, ids, temperature, compiled=compiled):
        out.append(tok)
        if len(out) >= max_tokens:
            break
    return out


__all__ = ["generate", "generate_step"]
