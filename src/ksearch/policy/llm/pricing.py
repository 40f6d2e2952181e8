"""What a call costs: USD per million input / output tokens per model, and the run's token and USD caps.

The built-in table holds list prices as published by the providers at the time of writing; prices change, so a
user's table (KSEARCH_LLM_PRICES=path to TOML or JSON: {"model": {"input": 1.25, "output": 10.0}}) overrides
it model by model. A model in neither costs 0 and is reported as unpriced, so a 0 in the report never looks
like a real price.
"""

from __future__ import annotations

import json
import logging
import math
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


#: A call goes out only if the caps leave room for its prompt and an answer of at least this many tokens (or
#: max_output_tokens, if smaller): an answer cut shorter is of no use.
MIN_ANSWER_TOKENS = 256


@dataclass
class Budget:
    """Spending so far against the caps. Checked before every call, which is then bounded: its max_tokens is what
    the token and USD caps leave after its prompt, so a run ends at a cap, not past it.

    The counters are what the run counts against its caps: an endpoint's claimed usage, except that a claim past
    the call's bound (its prompt and max_tokens, priced) which would break a cap counts at the bound, and stops
    the run (`stop_note` says why; the claim itself stays in the call's record).
    """

    prices: dict[str, tuple[float, float]] = field(default_factory=lambda: dict(BUILTIN_PRICES))
    max_usd: float | None = None
    max_tokens: int | None = None
    tokens_in: int = 0
    tokens_out: int = 0
    cost_usd: float = 0.0
    unpriced: set[str] = field(default_factory=set)
    #: A server that takes no key (a local one) is free: its unpriced models need no warning.
    warn_unpriced: bool = True
    #: Set when a call claimed more than its bound and broke a cap: the run stops at the next check.
    stop_note: str | None = None

    @property
    def tokens(self) -> int:
        return self.tokens_in + self.tokens_out

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

    def bound_cost(self, model: str, tokens_in: int, tokens_out: int) -> float:
        """What a call of at most these tokens may cost (0 for an unpriced model; no warning)."""
        price = self.prices.get(model)
        return 0.0 if price is None else (tokens_in * price[0] + tokens_out * price[1]) / 1e6

    def check(self) -> None:
        if self.stop_note is not None:
            raise BudgetExhausted(self.stop_note, "tokens" if "token cap" in self.stop_note else "usd")
        if self.max_tokens is not None and self.tokens >= self.max_tokens:
            raise BudgetExhausted(
                f"LLM token cap reached: {self.tokens} tokens used, cap {self.max_tokens} (max_tokens_total)",
                "tokens",
            )
        if self.max_usd is not None and self.cost_usd >= self.max_usd:
            raise BudgetExhausted(
                f"LLM spending cap reached: ${self.cost_usd:.4f} spent, cap ${self.max_usd:.4f} (max_usd)"
            )

    def answer_room(self, model: str, prompt_tokens: int, wanted: int) -> int:
        """max_tokens for a call whose prompt is `prompt_tokens` (estimated) and whose answer wants `wanted`: what
        the token and USD caps leave after the prompt. BudgetExhausted, before anything is sent, when they leave
        less than a useful answer (MIN_ANSWER_TOKENS)."""
        self.check()
        floor = min(MIN_ANSWER_TOKENS, wanted)
        room = wanted
        if self.max_tokens is not None:
            left = self.max_tokens - self.tokens - prompt_tokens
            if left < floor:
                raise BudgetExhausted(
                    f"LLM token cap reached: {self.tokens} tokens used, cap {self.max_tokens} (max_tokens_total); "
                    f"the next prompt (~{prompt_tokens} tokens) and a {floor}-token answer do not fit in the "
                    f"{self.max_tokens - self.tokens} left",
                    "tokens",
                )
            room = min(room, left)
        price = self.prices.get(model)
        if self.max_usd is not None and price is not None:
            left_usd = self.max_usd - self.cost_usd - prompt_tokens * price[0] / 1e6
            # (+1e-6: a float's last bit must not cost the answer a token at the exact boundary)
            affordable = math.floor(left_usd * 1e6 / price[1] + 1e-6) if price[1] > 0 else (room if left_usd >= 0 else -1)
            if affordable < floor:
                raise BudgetExhausted(
                    f"LLM spending cap reached: ${self.cost_usd:.4f} spent, cap ${self.max_usd:.4f} (max_usd); "
                    f"what is left does not pay for the next call (~{prompt_tokens} prompt tokens and a "
                    f"{floor}-token answer at {model}'s price)"
                )
            room = min(room, affordable)
        return room

    def count(
        self, claimed: tuple[int, int, float], bound: tuple[int, int, float]
    ) -> tuple[tuple[int, int, float], str | None]:
        """What a call counts against the caps, from its claimed (tokens_in, tokens_out, cost) and its bound:
        the claim, unless it passes the bound and would break a cap; then the bound (never more than the claim),
        with a note that stops the run at the next check."""
        over = claimed[0] + claimed[1] > bound[0] + bound[1] or claimed[2] > bound[2] * (1 + 1e-9)
        breaks = (self.max_tokens is not None and self.tokens + claimed[0] + claimed[1] > self.max_tokens) or (
            self.max_usd is not None and self.cost_usd + claimed[2] > self.max_usd
        )
        if not (over and breaks):
            return claimed, None
        counted = (min(claimed[0], bound[0]), min(claimed[1], bound[1]), min(claimed[2], bound[2]))
        cap = (f"the token cap of {self.max_tokens}" if self.max_tokens is not None
               and self.tokens + claimed[0] + claimed[1] > self.max_tokens else f"the USD cap of ${self.max_usd:g}")
        self.stop_note = (
            f"LLM cap reached: the endpoint claimed {claimed[0] + claimed[1]:,} tokens (${claimed[2]:.4f}) for one "
            f"call, past its bound of {bound[0] + bound[1]:,} tokens (${bound[2]:.4f}) and past {cap}; the call "
            "counts at its bound and the run stops"
        )
        return counted, self.stop_note

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
            "stop_note": self.stop_note,
        }

    def load_state(self, state: Mapping[str, object]) -> None:
        self.tokens_in = int(state.get("tokens_in", 0))  # type: ignore[call-overload]
        self.tokens_out = int(state.get("tokens_out", 0))  # type: ignore[call-overload]
        self.cost_usd = float(state.get("cost_usd", 0.0))  # type: ignore[arg-type]
        self.unpriced = set(state.get("unpriced_models", ()))  # type: ignore[call-overload]
        note = state.get("stop_note")
        self.stop_note = str(note) if note else None

    def load_usage(self, usage: Mapping[str, object]) -> None:
        """The counters from the run's ledger (search.ledger): what every recorded call counted, lost ones at
        their bound. It is written with each call, so it is exact where a loop-state snapshot may lag."""
        self.tokens_in = int(usage.get("tokens_in", 0) or 0)  # type: ignore[call-overload]
        self.tokens_out = int(usage.get("tokens_out", 0) or 0)  # type: ignore[call-overload]
        self.cost_usd = float(usage.get("cost_usd", 0.0) or 0.0)  # type: ignore[arg-type]
        note = usage.get("stop_note")
        self.stop_note = str(note) if note else self.stop_note
