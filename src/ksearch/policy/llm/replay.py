"""Replay: answer each call with the recorded response of the same position, without touching the network.

A recorded run's calls table is the script. The policy asks in the same order as the original run (the prompts
are functions of the recorded evaluations), so position i answers call i. With `strict`, every prompt must
match its recording byte for byte; the first that does not stops the replay with the call index, role and
first differing line.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ksearch.errors import CallFailed, ReplayMismatch
from ksearch.policy.llm.client import Messages, Outcome


def render_prompt(messages: Messages) -> str:
    """The prompt as stored in the run (and compared on replay): every message, its role in a header line."""
    return "\n\n".join(f"[{m['role']}]\n{m['content']}" for m in messages)


def first_difference(recorded: str, now: str) -> str:
    old, new = recorded.splitlines(), now.splitlines()
    for i, (a, b) in enumerate(zip(old, new, strict=False)):
        if a != b:
            return f"line {i + 1}: recorded {_clip(a)!r}, now {_clip(b)!r}"
    if len(old) != len(new):
        i = min(len(old), len(new))
        a = old[i] if i < len(old) else "<end>"
        b = new[i] if i < len(new) else "<end>"
        return f"line {i + 1}: recorded {_clip(a)!r}, now {_clip(b)!r}"
    return "they differ only in line endings or trailing whitespace"


def _clip(text: str, limit: int = 100) -> str:
    return text if len(text) <= limit else text[:limit] + "..."


class ReplayTransport:
    def __init__(self, recorded: Sequence[Mapping[str, Any]], strict: bool = False) -> None:
        self.recorded = list(recorded)
        self.strict = strict
        self.position = 0

    def complete(
        self,
        role: str,
        model: str | None,
        messages: Messages,
        *,
        json_mode: bool = False,
        schema: str | None = None,
        max_tokens: int | None = None,
    ) -> Outcome:
        i = self.position
        if i >= len(self.recorded):
            raise ReplayMismatch(
                f"replay ran past the recording: call {i} ({role}) was not recorded "
                f"(the recording has {len(self.recorded)} calls)"
            )
        rec = self.recorded[i]
        prompt = render_prompt(messages)
        if rec.get("role") != role:
            raise ReplayMismatch(
                f"replay diverged at call {i}: recorded role {rec.get('role')!r}, now {role!r}"
            )
        if self.strict and rec.get("prompt") != prompt:
            raise ReplayMismatch(
                f"replay diverged at call {i} ({role}): the prompt differs from the recording at "
                f"{first_difference(rec.get('prompt') or '', prompt)}"
            )
        self.position += 1
        retries = int(rec.get("retries") or 0)
        latency = float(rec.get("latency_s") or 0.0)
        if rec.get("error"):
            raise CallFailed(str(rec["error"]), retries, latency)
        return Outcome(
            text=rec.get("response") or "",
            model=rec.get("model") or (model or ""),
            tokens_in=int(rec.get("tokens_in") or 0),
            tokens_out=int(rec.get("tokens_out") or 0),
            latency_s=latency,
            retries=retries,
            finish_reason=None,
            cost_usd=float(rec.get("cost_usd") or 0.0),
        )
