"""A Mamba model's prefill and decode step as `mx.compile`d functions of (tokens, states) -> (last logits, states).

Why: on MLX-CUDA a decode step of the eager model is bound by the host, not the GPU. Each of the ~10 graph nodes per
layer costs Python and dispatch time (an eager node ~7-9 us, compiled 1-5 us: benchmarks/results/mlx-cuda-overhead-*).
A compiled function is traced once per input shape and replayed without Python: on the H200 the mamba-370m decode went
from 192 (eager) to 319 tok/s (benchmarks/results/mamba-370m-mlx-cuda-nvidia-h200.json).

The states are explicit inputs and outputs (the compiled function holds no array state), zero-filled before the
first call: a zero conv history and a zero SSM state give exactly what a cacheless prefill computes. Parameters
are captured as constants at trace time, so a `CompiledMamba` belongs to one set of weights: build a new one after
`load_weights` / `update` (generate.generate_step does, once per generation).
"""

from __future__ import annotations

from typing import Any

import mlx.core as mx

from ksearch.config import env_switch
from ksearch.models.mamba import Model


class CompiledMamba:
    def __init__(self, model: Model, batch: int = 1) -> None:
        self.model = model
        self.batch = batch
        dtype = model.backbone.embeddings.weight.dtype
        a = model.args
        # Derive the kernel parameters now, outside any trace: derive_params evaluates arrays, which a trace can't.
        for layer in model.backbone.layers:
            layer.mixer.params()
            layer.mixer.proj_t()
        zeros: list[mx.array] = []
        for _ in model.backbone.layers:
            zeros.append(mx.zeros((batch, a.d_conv - 1, a.d_inner), dtype=dtype))
            zeros.append(mx.zeros((batch, a.d_inner, a.d_state), dtype=mx.float32))
        mx.eval(zeros)
        self._zeros = zeros  # arrays are immutable: every reset shares these, no new graph nodes
        self.states = list(zeros)
        self._fn = mx.compile(self._forward)

    def _forward(self, tokens: mx.array, *states: mx.array) -> tuple[mx.array, ...]:
        cache: list[list[Any]] = [[states[2 * i], states[2 * i + 1]] for i in range(len(states) // 2)]
        logits = self.model(tokens, cache)
        return (logits[:, -1], *[s for layer in cache for s in layer])

    def __call__(self, tokens: mx.array) -> mx.array:
        """tokens (batch, L): a prefill chunk (L > 1) or a decode step (L == 1); returns the last position's logits
        (batch, vocab) and keeps the states for the next call. Lazy: nothing runs until the result is evaluated."""
        if tokens.ndim != 2 or tokens.shape[0] != self.batch:
            raise ValueError(f"tokens must be (batch={self.batch}, L), got shape {tuple(tokens.shape)}")
        out = self._fn(tokens, *self.states)
        self.states = list(out[1:])
        return out[0]

    def reset(self) -> None:
        """Back to the empty cache (a new sequence); the traces are kept."""
        self.states = list(self._zeros)


def use_compiled(flag: bool | None = None) -> bool:
    """Compiled by default; KSEARCH_MAMBA_COMPILE=0 (or compiled=False) runs the eager model (for comparisons).
    A value that is not on or off (KSEARCH_MAMBA_COMPILE=maybe) is a ConfigError."""
    if flag is not None:
        return flag
    return env_switch("KSEARCH_MAMBA_COMPILE", True)
