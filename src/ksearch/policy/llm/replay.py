"""Replay: answer each call with the recorded response of the same position, without touching the network.

A recorded run's calls table is the script (the calls the search used: search.replay.used_calls). The policy
asks in the same order as the original run (the prompts are functions of the recorded evaluations), so position
i answers call i. With `strict` (`--replay RUN --reevaluate`, where the candidates are measured again), every
prompt must ask what its recording asked; the first that does not stops the replay with the call index, role and
first differing line. "What it asked" is the prompt with what a new measurement changes left out: the noise in a
verdict's words (scratch paths, PIDs, addresses, durations: policy.stable, which newer runs apply before the text
reaches a prompt) and the numbers outside ```python blocks (latencies, speedups, scores, rankings). The code,
the task, the action, the verdicts' statuses and messages must be the same.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from ksearch.errors import CallFailed, ReplayMismatch
from ksearch.policy.llm.client import Messages, Outcome
from ksearch.policy.stable import stable_text


def render_prompt(messages: Messages) -> str:
    """The prompt as stored in the run (and compared on replay): every message, its role in a header line."""
    return "\n\n".join(f"[{m['role']}]\n{m['content']}" for m in messages)


#: A number standing alone (not part of a name such as c0003, n12 or cpu_256x1024_f32), maybe a factor (1.3x).
_NUMBER = re.compile(r"(?<![\w.])[-+]?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?(?:x(?!\w))?(?!\w|\.\d)")


def comparable(prompt: str) -> list[str]:
    """The prompt's lines as a strict replay compares them (see the module's docstring)."""
    out: list[str] = []
    in_code = False
    for line in stable_text(prompt).splitlines():
        fence = line.strip()
        if fence.startswith("```"):
            in_code = not in_code and fence[3:].strip().lower() in ("python", "py")
            out.append(line)
            continue
        out.append(line if in_code else _NUMBER.sub("#", line))
    return out


def same_question(recorded: str, now: str) -> bool:
    return recorded == now or comparable(recorded) == comparable(now)


def first_difference(recorded: str, now: str) -> str:
    """Where two prompts differ in what they ask, quoting both lines as they are."""
    old, new = recorded.splitlines(), now.splitlines()
    old_c, new_c = comparable(recorded), comparable(now)
    if len(old_c) != len(old) or len(new_c) != len(new):  # normalising changed the line structure: show it
        old, new = old_c, new_c
    for i, (a, b) in enumerate(zip(old_c, new_c, strict=False)):
        if a != b:
            return f"line {i + 1}: recorded {_clip(old[i])!r}, now {_clip(new[i])!r}"
    if len(old_c) != len(new_c):
        i = min(len(old_c), len(new_c))
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
        if self.strict and not same_question(rec.get("prompt") or "", prompt):
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
