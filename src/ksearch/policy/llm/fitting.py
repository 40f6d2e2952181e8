"""Fitting prompts into the model's context window, least important sections first.

A prompt is a template with its variables and an ordered list of trims: (variable, smaller value), least
important first (attempt history, the porting context, the spec's details, the analysis, the verdict's log).
The task, the candidate contract, the action and the code to work on are never trimmed. Tokens are estimated
from characters (3 a token: generous for code and JSON, so an estimate errs towards fitting). The result
depends only on the inputs and the window, so a replayed run renders the same prompts.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from ksearch.policy.llm.prompts import render

CHARS_PER_TOKEN = 3.0
#: Tokens a chat template adds around each message.
MESSAGE_OVERHEAD = 8
#: Room kept between the estimate and the window (chat template, BOS/EOS, estimate error).
MARGIN_TOKENS = 64
#: The answer gets at least this many tokens (or max_output_tokens, if smaller) when the window is known.
MIN_ANSWER_TOKENS = 1024
TRIMMED = "[... trimmed to fit the model's context]"


def estimate_tokens(text: str) -> int:
    return int(len(text) / CHARS_PER_TOKEN) + 1


def messages_tokens(messages: list[dict[str, str]]) -> int:
    return sum(estimate_tokens(m["content"]) + MESSAGE_OVERHEAD for m in messages)


@dataclass(frozen=True)
class Window:
    """The model's context (None: unknown, nothing is fitted) and the answer's share of it."""

    context_tokens: int | None
    max_output_tokens: int = 8192

    @property
    def answer_tokens(self) -> int:
        if self.context_tokens is None:
            return self.max_output_tokens
        return min(self.max_output_tokens, max(MIN_ANSWER_TOKENS, self.context_tokens // 3))

    @property
    def prompt_tokens(self) -> int | None:
        """What a prompt (all its messages) may take; None: no limit known."""
        if self.context_tokens is None:
            return None
        return self.context_tokens - self.answer_tokens - MARGIN_TOKENS

    def max_tokens_for(self, prompt_tokens: int) -> int | None:
        """max_tokens for a prompt of this size: what the window leaves, within max_output_tokens (vLLM
        refuses a request whose prompt and max_tokens together exceed the window)."""
        if self.context_tokens is None:
            return None
        left = self.context_tokens - prompt_tokens - MARGIN_TOKENS
        return max(min(self.max_output_tokens, left), min(256, self.max_output_tokens))


@dataclass
class Prompt:
    template: str
    variables: dict[str, Any]
    trims: list[tuple[str, Any]] = field(default_factory=list)  # least important first


@dataclass
class Fitted:
    text: str
    trimmed: list[str]  # the variables cut, in order
    fits: bool


def fit(prompt: Prompt, budget_tokens: int | None) -> Fitted:
    """The prompt rendered whole if it fits `budget_tokens`, else with trims applied in order until it does
    (or all of them, when even that does not fit)."""
    text = render(prompt.template, **prompt.variables)
    if budget_tokens is None or estimate_tokens(text) + MESSAGE_OVERHEAD <= budget_tokens:
        return Fitted(text, [], True)
    variables = dict(prompt.variables)
    trimmed: list[str] = []
    for name, value in prompt.trims:
        if variables.get(name) == value:
            continue
        variables[name] = value
        if name not in trimmed:
            trimmed.append(name)
        text = render(prompt.template, **variables)
        if estimate_tokens(text) + MESSAGE_OVERHEAD <= budget_tokens:
            return Fitted(text, trimmed, True)
    return Fitted(text, trimmed, False)


def shorter(text: str, fraction: float) -> str:
    """The first `fraction` of `text`, cut at a line end, marked as trimmed ("" for fraction 0)."""
    if fraction <= 0 or not text:
        return ""
    keep = int(len(text) * fraction)
    if keep >= len(text):
        return text
    cut = text.rfind("\n", 0, keep)
    cut = cut if cut > keep // 2 else keep
    return text[:cut].rstrip() + "\n" + TRIMMED


def spec_trims(spec: str, port: str) -> list[tuple[str, Any]]:
    """The translation layer's sections, from the least to the most useful to keep."""
    steps: list[tuple[str, Any]] = []
    if port:
        steps.append(("port", ""))
    if spec:
        steps += [("spec", shorter(spec, 0.5)), ("spec", shorter(spec, 0.25)), ("spec", "")]
    return steps


def compact_json(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), sort_keys=True, default=str)
