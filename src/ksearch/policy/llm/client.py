"""One chat request to any OpenAI-compatible endpoint, with our own retries, timeout and usage accounting.

The SDK's own retries are switched off (max_retries=0) so that every retry is ours: counted, logged with its
cause, and paced by exponential backoff with jitter (honouring Retry-After). `openai` is imported here lazily,
inside the client, because the GPU machines that only run candidates do not have it.
"""

from __future__ import annotations

import logging
import os
import random
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from ksearch.errors import CallFailed, KSearchError
from ksearch.policy.llm.presets import Endpoint

log = logging.getLogger("ksearch.llm")

Messages = list[dict[str, str]]

#: Status codes worth another try: timeouts, conflicts, rate limits, and the server's own troubles.
RETRY_STATUS = frozenset({408, 409, 425, 429})


@dataclass
class Outcome:
    """What one logical call produced (after any retries)."""

    text: str
    model: str
    tokens_in: int = 0
    tokens_out: int = 0
    latency_s: float = 0.0
    retries: int = 0
    finish_reason: str | None = None
    cost_usd: float | None = None  # None: price it from the table (a replay brings the recorded cost)


class Transport(Protocol):
    def complete(
        self, role: str, model: str | None, messages: Messages, *, json_mode: bool = False
    ) -> Outcome: ...


@dataclass
class Backoff:
    """Delay before retry k (0-based): uniform in [d/2, d] with d = min(max_s, base_s * 2**k); full jitter
    spreads
    the retries of concurrent runs hitting the same rate limit."""

    base_s: float = 1.0
    max_s: float = 60.0

    def delay(self, attempt: int, rng: random.Random, retry_after: float | None = None) -> float:
        d = min(self.max_s, self.base_s * (2**attempt))
        d = d * (0.5 + 0.5 * rng.random())
        if retry_after is not None:
            d = max(d, min(retry_after, self.max_s))
        return d


@dataclass
class Sampling:
    temperature: float = 0.7
    reasoning_effort: str | None = None
    max_output_tokens: int = 8192


class ChatClient:
    """The live transport. The key's value is read from the named variable when the SDK client is built (first
    call), held only inside that SDK object, and scrubbed from any error text we pass on."""

    def __init__(
        self,
        endpoint: Endpoint,
        sampling: Sampling,
        *,
        timeout_s: float,
        max_retries: int,
        backoff: Backoff | None = None,
        rng: random.Random | None = None,
        sleep: Callable[[float], None] = time.sleep,
        environ: Mapping[str, str] | None = None,
    ) -> None:
        self.endpoint = endpoint
        self.sampling = sampling
        self.timeout_s = timeout_s
        self.max_retries = max_retries
        self.backoff = backoff or Backoff()
        self.rng = rng or random.Random()
        self.sleep = sleep
        self._environ = environ
        self._sdk: Any = None
        self._served_model: str | None = None

    # -- the SDK client, built on first use ------------------------------------------------------------------
    def _key(self) -> str | None:
        if self.endpoint.api_key_env is None:
            return None
        env = os.environ if self._environ is None else self._environ
        return env.get(self.endpoint.api_key_env) or None

    def _client(self) -> Any:
        if self._sdk is None:
            from openai import OpenAI  # lazy: not installed where only candidates run

            # Local servers want no key, but the SDK insists on a non-empty one.
            self._sdk = OpenAI(
                api_key=self._key() or "no-key",
                base_url=self.endpoint.base_url,
                timeout=self.timeout_s,
                max_retries=0,
            )
        return self._sdk

    def _scrub(self, text: str) -> str:
        key = self._key()
        return text.replace(key, "***") if key else text

    # -- one logical call ------------------------------------------------------------------------------------
    def model_for(self, model: str | None) -> str:
        """`model`, or the first model the server lists (local servers serve one; naming it is a chore)."""
        if model:
            return model
        if self._served_model is None:
            listing = self._with_retries(lambda: self._client().models.list(), "list models")[0]
            ids = [m.id for m in getattr(listing, "data", [])]
            if not ids:
                raise CallFailed(f"{self.endpoint.base_url} lists no models; pass --model NAME")
            self._served_model = ids[0]
            log.info("using model %r served at %s", ids[0], self.endpoint.base_url)
        return self._served_model

    def complete(
        self, role: str, model: str | None, messages: Messages, *, json_mode: bool = False
    ) -> Outcome:
        name = self.model_for(model)
        kwargs: dict[str, Any] = {
            "model": name,
            "messages": messages,
            self.endpoint.max_tokens_param: self.sampling.max_output_tokens,
        }
        if self.sampling.reasoning_effort:
            kwargs["reasoning_effort"] = self.sampling.reasoning_effort
        # OpenAI's reasoning models reject any temperature once reasoning is on; elsewhere it is honoured.
        if not (self.sampling.reasoning_effort and self.endpoint.max_tokens_param == "max_completion_tokens"):
            kwargs["temperature"] = self.sampling.temperature
        if json_mode and self.endpoint.json_mode:
            kwargs["response_format"] = {"type": "json_object"}
        start = time.monotonic()
        resp, retries = self._with_retries(
            lambda: self._client().chat.completions.create(**kwargs), role, started=start
        )
        choice = resp.choices[0]
        text = choice.message.content or ""
        usage = getattr(resp, "usage", None)
        tin = getattr(usage, "prompt_tokens", None)
        tout = getattr(usage, "completion_tokens", None)
        if tin is None or tout is None:
            # Some local servers omit usage; an estimate (4 characters a token) keeps token caps meaningful.
            tin = sum(len(m["content"]) for m in messages) // 4
            tout = len(text) // 4
        return Outcome(
            text=text,
            model=name,
            tokens_in=int(tin),
            tokens_out=int(tout),
            latency_s=time.monotonic() - start,
            retries=retries,
            finish_reason=choice.finish_reason,
        )

    def _with_retries(
        self, call: Callable[[], Any], what: str, started: float | None = None
    ) -> tuple[Any, int]:
        import openai

        start = time.monotonic() if started is None else started
        attempt = 0
        while True:
            retry_after: float | None = None
            try:
                resp = call()
                if what != "list models" and not getattr(resp, "choices", None):
                    raise _Malformed("the response has no choices")
                return resp, attempt
            except openai.APIStatusError as exc:
                status = exc.status_code
                cause = f"HTTP {status}: {_short(str(exc))}"
                if status < 500 and status not in RETRY_STATUS:
                    raise CallFailed(
                        self._scrub(f"{what}: {cause} ({_advice(status)})"), attempt, time.monotonic() - start
                    ) from None
                retry_after = _retry_after(exc.response.headers if exc.response is not None else {})
            except openai.APITimeoutError:
                cause = f"no answer within {self.timeout_s:g} s"
            except openai.APIConnectionError as exc:
                cause = f"connection failed ({_short(str(exc.__cause__ or exc))})"
            except (openai.OpenAIError, _Malformed, ValueError) as exc:
                # A body that is not the JSON the SDK expects (a proxy's HTML page, a half-sent body).
                cause = f"malformed response ({type(exc).__name__}: {_short(str(exc))})"
            if attempt >= self.max_retries:
                raise CallFailed(
                    self._scrub(f"{what}: {cause}; gave up after {attempt} retries"),
                    attempt,
                    time.monotonic() - start,
                ) from None
            delay = self.backoff.delay(attempt, self.rng, retry_after)
            log.warning(
                "%s: %s; retry %d/%d in %.1f s",
                what,
                self._scrub(cause),
                attempt + 1,
                self.max_retries,
                delay,
            )
            self.sleep(delay)
            attempt += 1


class _Malformed(KSearchError):
    pass


def _short(text: str, limit: int = 300) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[:limit] + "..."


def _retry_after(headers: Any) -> float | None:
    try:
        value = headers.get("retry-after")
        return float(value) if value is not None else None
    except (TypeError, ValueError):
        return None  # an HTTP date: rare from these APIs; backoff alone will do


def _advice(status: int) -> str:
    if status in (401, 403):
        return "check the API key variable and that the key may use this model"
    if status == 404:
        return "check --base-url (it usually ends in /v1) and --model"
    return "the server refused the request; see its message"
