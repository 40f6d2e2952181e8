"""Parametrised kernel template families: the offline proposer's hands.

A family renders complete candidate sources (the `run(**inputs)` contract) from a dict of parameters. It declares the
knowledge-base pattern ids it implements, so the offline proposer can map a world-model action (a pattern) to the
families that realise it, and the discrete choices of each parameter, so it can sample and mutate them.
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

#: Candidate code shared by the CUDA families: whether the device is Hopper (wgmma, tensor copies, the tensor-core
#: decode), asked once when the candidate loads.
HOPPER_CHECK = '''
def _hopper():
    try:
        return int(mx.device_info().get("compute_capability_major", 0)) == 9
    except Exception:
        return False


_HOPPER = _hopper()
'''

# A candidate's kernels with their template arguments written into their headers (in MLX's namespace), one kernel
# object per set of them kept in `_MADE`, called without `template=`: MLX formats every template argument into the
# kernel's text and name on every call, host time a short call waits for (kernel_text.constant_lines, the library's
# way). `contiguous`: MLX's `ensure_row_contiguous`.
CONSTANT_KERNELS = '''
_TYPES = {mx.float16: "__half", mx.bfloat16: "__nv_bfloat16"}
_MADE = {}


def _make(name, source, inputs, outputs, header, constants, smem=0, contiguous=False):
    # One kernel object per set of constants (its own name: MLX before 0.32.1 kept kernels by name alone).
    lines = "".join(f"using {n} = {_TYPES[v]};\\n" if n == "T" else
                    f"constexpr bool {n} = {str(v).lower()};\\n" if isinstance(v, bool) else
                    f"constexpr int {n} = {v};\\n" for n, v in constants)
    return mx.fast.cuda_kernel(name=f"{name}_{len(_MADE)}", input_names=inputs, output_names=outputs, source=source,
                               header=header + "namespace mlx::core::cu {\\n" + lines + "}  // namespace mlx::core::cu\\n",
                               ensure_row_contiguous=contiguous, shared_memory=smem)
'''


# The same for a Metal candidate: the template arguments as program-scope constants of the header, as the library's
# Metal kernels carry them (kernel_text.metal_constant_lines); MLX's Metal call formats template arguments into every
# call as its CUDA call does (on Apple GPUs not measured).
METAL_CONSTANT_KERNELS = '''
_TYPES = {mx.float16: "float16_t", mx.bfloat16: "bfloat16_t", mx.float32: "float"}
_MADE = {}


def _make(name, source, inputs, outputs, constants):
    # One kernel object per set of constants, under a name of its own.
    lines = "".join(f"using {n} = {_TYPES[v]};\\n" if n == "T" else
                    f"constant constexpr bool {n} = {str(v).lower()};\\n" if isinstance(v, bool) else
                    f"constant constexpr int {n} = {v};\\n" for n, v in constants)
    return mx.fast.metal_kernel(name=f"{name}_{len(_MADE)}", input_names=inputs, output_names=outputs, source=source,
                                header=lines)
'''

@dataclass(frozen=True)
class TemplateFamily:
    #: Unique id, e.g. "softmax.cuda.block_row".
    id: str
    #: Task names this family can implement (built-in names; a user's task may name a family in its own file).
    tasks: tuple[str, ...]
    #: Backend names: "mlx-cpu", "mlx-cuda", "mlx-metal".
    backends: tuple[str, ...]
    #: Knowledge-base pattern ids (ksearch/knowledge/data/patterns.yaml) this family realises; the first is primary.
    patterns: tuple[str, ...]
    #: Discrete choices per parameter; the first choice of each is the family's default.
    params: Mapping[str, tuple[Any, ...]]
    #: params -> candidate source.
    render: Callable[[dict[str, Any]], str]
    #: Optional constraint on a parameter combination (e.g. threads * items <= 1024).
    valid: Callable[[dict[str, Any]], bool] = field(default=lambda _p: True)
    description: str = ""
    #: Per pattern id, the parameter choices that realise it (e.g. {"online_softmax": {"online": (True,)}}); patterns
    #: not listed are realised by the family as a whole.
    pattern_params: Mapping[str, Mapping[str, tuple[Any, ...]]] = field(default_factory=dict)
    #: Performance descriptors for MAP-Elites (the `evolve` strategy): parameter names whose values bin candidates.
    descriptors: tuple[str, ...] = ()

    def realise(self, pattern: str, params: dict[str, Any], rng: random.Random) -> dict[str, Any]:
        """params changed so that `pattern` is in effect (used by the first attempt at an action)."""
        fixed = self.pattern_params.get(pattern, {})
        out = {**self.default(), **params}
        for k, choices in fixed.items():
            if out.get(k) not in choices:
                out[k] = rng.choice(list(choices))
        if not self.valid(out):
            for _ in range(200):
                trial = self.sample(rng)
                trial.update({k: out[k] for k in fixed})
                if self.valid(trial):
                    return trial
        return out

    def default(self) -> dict[str, Any]:
        return {k: v[0] for k, v in self.params.items()}

    def sample(self, rng: random.Random, tries: int = 200) -> dict[str, Any]:
        for _ in range(tries):
            p = {k: rng.choice(list(v)) for k, v in self.params.items()}
            if self.valid(p):
                return p
        return self.default()

    def mutate(self, params: dict[str, Any], rng: random.Random, n: int = 1, tries: int = 200) -> dict[str, Any]:
        """Change n parameters to a neighbouring choice (ordered choices) or another choice."""
        keys = [k for k, v in self.params.items() if len(v) > 1]
        if not keys:
            return dict(params)
        for _ in range(tries):
            p = {**self.default(), **params}
            for k in rng.sample(keys, min(n, len(keys))):
                choices = list(self.params[k])
                i = choices.index(p[k]) if p[k] in choices else 0
                if rng.random() < 0.7 and len(choices) > 2:
                    j = min(len(choices) - 1, max(0, i + rng.choice((-1, 1))))
                else:
                    j = rng.randrange(len(choices))
                p[k] = choices[j]
            if self.valid(p) and p != params:
                return p
        return self.sample(rng)

    def all_params(self, limit: int = 100_000) -> list[dict[str, Any]]:
        """Every valid combination (for compile-checking every renderable template in CI)."""
        keys = list(self.params)
        out = []
        for combo in itertools.islice(itertools.product(*(self.params[k] for k in keys)), limit):
            p = dict(zip(keys, combo, strict=True))
            if self.valid(p):
                out.append(p)
        return out

    def source(self, params: dict[str, Any]) -> str:
        return self.render({**self.default(), **params})
