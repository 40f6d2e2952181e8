"""What a call costs: USD per million input / output tokens per model, and the run's token and USD caps.

The built-in table holds list prices as published by the providers at the time of writing; prices change, so a
user's table (KSEARCH_LLM_PRICES=path to TOML or JSON: {"model": {"input": 1.25, "output": 10.0}}) overrides
it model by model. A model in neither costs 0 and is reported as unpriced, so a 0 in the report never looks
like a real price.
"""

from __future__ import annotations

import json
import logging
import os
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from ksearch.errors import BudgetExhausted, LLMConfigError

log = logging.getLogger("ksearch.llm")

PRICES_ENV = "KSEARCH_LLM_PRICES"

#: USD per 1M tokens (input, output).
BUILTIN_PRICES: dict[str, tuple[float, float]] = {
    "gpt-5": (1.25, 10.0),
    "gpt-5-mini": (0.25, 2.0),
    "gpt-5-nano": (0.05, 0.40),
    "gpt-4.1": (2.0, 8.0),
    "gpt-4.1-mini": (0.40, 1.60),
    "gpt-4o": (2.50, 10.0),
    "gpt-4o-mini": (0.15, 0.60),
    "o3": (2.0, 8.0),
    "o4-mini": (1.10, 4.40),
    "gemini-2.5-pro": (1.25, 10.0),
    "gemini-2.5-flash": (0.30, 2.50),
    "claude-sonnet-4-5": (3.0, 15.0),
    "claude-opus-4-1": (15.0, 75.0),
    "claude-haiku-4-5": (1.0, 5.0),
}


def load_prices(
    path: str | Path | None = None, environ: Mapping[str, str] | None = None
) -> dict[str, tuple[float, float]]:
    """The built-in table overlaid with the user's file (the argument, else $KSEARCH_LLM_PRICES)."""
    env = os.environ if environ is None else environ
    table = dict(BUILTIN_PRICES)
    where = path or env.get(PRICES_ENV)
    if not where:
        return table
    p = Path(where)
    try:
        text = p.read_text()
        data = json.loads(text) if p.suffix == ".json" else tomllib.loads(text)
    except (OSError, ValueError) as exc:
        raise LLMConfigError(
            f"price table {p} cannot be read ({exc}); expected TOML or JSON "
            '{"model": {"input": USD_per_M, "output": USD_per_M}}'
        ) from exc
    data = data.get("prices", data)
    for model, row in data.items():
        try:
            table[model] = (float(row["input"]), float(row["output"]))
        except (KeyError, TypeError, ValueError) as exc:
            raise LLMConfigError(
                f"price table {p}: model {model!r} needs numeric 'input' and 'output' "
                "(USD per million tokens)"
            ) from exc
    return table


@dataclass
class Budget:
    """Spending so far against the caps; checked before every call, so a run stops between calls."""

    prices: dict[str, tuple[float, float]] = field(default_factory=lambda: dict(BUILTIN_PRICES))
    max_usd: float | None = None
    max_tokens: int | None = None
    tokens_in: int = 0
    tokens_out: int = 0
    cost_usd: float = 0.0
    unpriced: set[str] = field(default_factory=set)
    #: A server that takes no key (a local one) is free: its unpriced models need no warning.
    warn_unpriced: bool = True

    def cost(self, model: str, tokens_in: int, tokens_out: int) -> float:
        price = self.prices.get(model)
        if price is None:
            if model not in self.unpriced:
                self.unpriced.add(model)
                if not self.warn_unpriced:
                    return 0.0
                log.warning(
                    "no price for model %r: its calls are counted as $0 (set %s to a price table)",
                    model,
                    PRICES_ENV,
                )
            return 0.0
        return (tokens_in * price[0] + tokens_out * price[1]) / 1e6

    def check(self) -> None:
        if self.max_tokens is not None and self.tokens_in + self.tokens_out >= self.max_tokens:
            raise BudgetExhausted(
                f"LLM token cap reached: {self.tokens_in + self.tokens_out} tokens used, "
                f"cap {self.max_tokens} (max_tokens_total)"
            )
        if self.max_usd is not None and self.cost_usd >= self.max_usd:
            raise BudgetExhausted(
                f"LLM spending cap reached: ${self.cost_usd:.4f} spent, cap ${self.max_usd:.4f} (max_usd)"
            )

    def add(self, tokens_in: int, tokens_out: int, cost_usd: float) -> None:
        self.tokens_in += tokens_in
        self.tokens_out += tokens_out
        self.cost_usd += cost_usd

    def state(self) -> dict[str, object]:
        return {
            "tokens_in": self.tokens_in,
            "tokens_out": self.tokens_out,
            "cost_usd": self.cost_usd,
            "unpriced_models": sorted(self.unpriced),
        }

    def load_state(self, state: Mapping[str, object]) -> None:
        self.tokens_in = int(state.get("tokens_in", 0))  # type: ignore[call-overload]
        self.tokens_out = int(state.get("tokens_out", 0))  # type: ignore[call-overload]
        self.cost_usd = float(state.get("cost_usd", 0.0))  # type: ignore[arg-type]
        self.unpriced = set(state.get("unpriced_models", ()))  # type: ignore[call-overload]
