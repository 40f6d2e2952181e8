"""Errors of the LLM policy that the caller must tell apart from PolicyError (which the loop counts and
survives).
"""

from __future__ import annotations

from ksearch.policy.base import PolicyError


class LLMConfigError(ValueError):
    """The LLM settings cannot work (unknown preset, unset key variable); the message says what to do."""


class ReplayMismatch(RuntimeError):
    """A replayed run asked for a call the recording cannot answer (a prompt differs, or the recording ran
    out).

    Not a PolicyError on purpose: the loop must stop here, not count it and carry on with a diverged replay.
    """


class CallFailed(PolicyError):
    """One LLM call failed for good (retries exhausted, or an error that retrying cannot fix)."""

    def __init__(self, message: str, retries: int = 0, latency_s: float = 0.0) -> None:
        super().__init__(message)
        self.retries = retries
        self.latency_s = latency_s


class AnswerTooLarge(CallFailed):
    """The answer's body passed the size cap ([llm] max_answer_kb): refused unread past the cap, never parsed
    or stored; the message gives its size and its first bytes."""

    def __init__(self, message: str, retries: int = 0, latency_s: float = 0.0, size: int = 0) -> None:
        super().__init__(message, retries, latency_s)
        self.size = size


class ContextTooSmall(CallFailed):
    """The server refused the prompt as longer than the model's context; the message is one line saying what
    to do (and, where the server named it, the context size, which later prompts are fitted to)."""
