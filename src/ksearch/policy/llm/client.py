"""One chat request to any OpenAI-compatible endpoint, with our own retries, deadline, size cap and usage
accounting.

The SDK's own retries are switched off (max_retries=0) so that every retry is ours: counted, logged with its
cause, and paced by exponential backoff with jitter (honouring Retry-After). Each attempt has ONE deadline,
from connecting to the last byte of the answer (the SDK's timeout is per read: an answer dripped a byte at a
time would never time out), and the answer is read incrementally up to a size cap (`max_answer_bytes`): a
larger one is refused with its size and its first bytes, never held whole. `openai` is imported here lazily,
inside the client, because the GPU machines that only run candidates do not have it.

Structured output: a call that names a schema (schemas.py) sends it as the response format in the endpoint's
dialect. An endpoint that refuses it (HTTP 400/422) gets the call again in free text, and keeps getting free
text for the rest of the run; the Outcome's notes say so.
"""

from __future__ import annotations

import logging
import random
import socket
import ssl
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from ksearch.errors import AnswerTooLarge, CallFailed, ContextTooSmall, KSearchError
from ksearch.policy.llm.answers import (
    PLAIN,
    Malformed,
    TooLarge,
    advice,
    content_text,
    context_message,
    count,
    error_text,
    read_json,
    retry_after_s,
    short,
)
from ksearch.policy.llm.context import ContextInfo, discover_context, is_context_error
from ksearch.policy.llm.deadline import DeadlineExceeded, run_with_deadline
from ksearch.policy.llm.keys import take_key
from ksearch.policy.llm.presets import Endpoint
from ksearch.policy.llm.schemas import JSON_OBJECT_SCHEMA, JSON_SCHEMA, response_format
from ksearch.store.redact import MASK, redact

log = logging.getLogger("ksearch.llm")

Messages = list[dict[str, str]]

#: Status codes worth another try: timeouts, conflicts, rate limits, and the server's own troubles.
RETRY_STATUS = frozenset({408, 409, 425, 429})
#: The default cap on one answer's HTTP body ([llm] max_answer_kb = 256).
DEFAULT_MAX_ANSWER_BYTES = 256 * 1024


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
    notes: list[str] = field(default_factory=list)  # e.g. the endpoint refused structured output


class Transport(Protocol):
    def complete(
        self,
        role: str,
        model: str | None,
        messages: Messages,
        *,
        json_mode: bool = False,
        schema: str | None = None,
        max_tokens: int | None = None,
    ) -> Outcome: ...


@dataclass
class Backoff:
    """Delay before retry k (0-based): uniform in [d/2, d] with d = min(max_s, base_s * 2**k); the jitter
    spreads the retries of concurrent runs hitting the same rate limit."""

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
    """The live transport. The key's value is taken from the named variable once, when the client is made
    (keys.take_key: out of the process environment, registered for redaction), held by the client and its SDK
    object only, and scrubbed from any error text we pass on.

    `timeout_s` bounds each attempt from connect to last byte; `deadline` (time.monotonic()), when set, bounds
    the whole logical call, retries and backoff included (`ksearch llm ping --timeout`).
    """

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
        max_answer_bytes: int = DEFAULT_MAX_ANSWER_BYTES,
        structured: bool = True,
        deadline: float | None = None,
    ) -> None:
        self.endpoint = endpoint
        self.sampling = sampling
        self.timeout_s = timeout_s
        self.max_retries = max_retries
        self.backoff = backoff or Backoff()
        self.rng = rng or random.Random()
        self.sleep = sleep
        self.max_answer_bytes = max_answer_bytes
        self.deadline = deadline
        #: The structured-output dialect in use (schemas.DIALECTS), None: free text.
        self.structured: str | None = endpoint.structured if structured else None
        self.refused = False  # the endpoint refused structured output: free text from then on
        self._api_key = take_key(endpoint.api_key_env, environ)
        self._sdk: Any = None
        self._served_model: str | None = None

    # -- the SDK client, built on first use ------------------------------------------------------------------
    def _key(self) -> str | None:
        return self._api_key

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
        return redact(text.replace(key, MASK) if key else text)

    # -- what the endpoint serves ----------------------------------------------------------------------------
    def model_for(self, model: str | None) -> str:
        """`model`, or the first model the server lists (local servers serve one; naming it is a chore)."""
        if model:
            return model
        if self._served_model is None:
            listing = self._with_retries(
                lambda seconds, cancelled: self._read(
                    self._client().models.with_streaming_response.list(timeout=seconds, extra_headers=PLAIN),
                    cancelled,
                ),
                "list models",
            )[0]
            entries = listing.get("data") if isinstance(listing, dict) else None
            ids = [str(m["id"]) for m in entries or [] if isinstance(m, dict) and m.get("id")]
            if not ids:
                raise CallFailed(f"{self.endpoint.base_url} lists no models; pass --model NAME")
            self._served_model = ids[0]
            log.info("using model %r served at %s", ids[0], self.endpoint.base_url)
        return self._served_model

    def discover_context(self, model: str | None, timeout_s: float = 5.0) -> ContextInfo:
        """The context window the server runs the model with, where the server says (see context.py)."""
        if not self.endpoint.context_probes:
            return ContextInfo(None, f"not asked ({self.endpoint.preset} does not say)")
        if self.deadline is not None:
            timeout_s = min(timeout_s, self.deadline - time.monotonic())
        return discover_context(
            self.endpoint.base_url,
            model or self._served_model,
            key=self._key(),
            probes=self.endpoint.context_probes,
            timeout_s=timeout_s,
        )

    def unreachable(self, timeout_s: float) -> str | None:
        """Why no request can reach the endpoint at all (nothing listens on its port, no such host, TLS spoken to
        a plain-HTTP server), or None: any answer (an HTTP error included), or none within `timeout_s` (a slow
        server is for the run's retries), says it may. One GET of the model listing, not retried."""
        import openai

        try:
            run_with_deadline(
                lambda seconds, cancelled: self._read(
                    self._client().models.with_streaming_response.list(timeout=seconds, extra_headers=PLAIN),
                    cancelled,
                ),
                timeout_s,
                "ksearch-llm-reach",
            )
        except openai.APITimeoutError:
            return None
        except openai.APIConnectionError as exc:
            return self._scrub(connection_cause(exc, self.endpoint.base_url))
        except Exception:  # an answer of any kind: the endpoint is there
            return None
        return None

    # -- one logical call ------------------------------------------------------------------------------------
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
        name = self.model_for(model)
        start = time.monotonic()
        notes: list[str] = []
        retries = 0
        before = (self.structured, self.refused)
        while True:
            dialect = self.structured if schema is not None else None
            kwargs = self._request(name, messages, json_mode, schema, dialect, max_tokens)
            try:
                data, tries = self._with_retries(
                    lambda seconds, cancelled, kw=kwargs: self._chat(kw, seconds, cancelled),  # type: ignore[misc]
                    role,
                    started=start,
                    dialect=dialect,
                    messages=messages,
                )
                retries += tries
                break
            except _Refused as exc:
                retries += exc.retries
                # llama-cpp-python's server takes a schema only inside {"type": "json_object"}, and says so.
                after = JSON_OBJECT_SCHEMA if dialect == JSON_SCHEMA and "json_object" in exc.detail else None
                note = self._scrub(
                    f"the endpoint refused structured output ({dialect}: {exc.cause}); "
                    + (f"trying the {after} form" if after else "free text (and extraction) for the rest of the run")
                )
                log.warning("%s: %s", role, note)
                notes.append(note)
                self.structured = after
                self.refused = after is None
            except CallFailed:
                if notes:  # free text failed as well: the refusal was not about the response format
                    self.structured, self.refused = before
                raise
        choice = data["choices"][0]
        message = choice.get("message") if isinstance(choice.get("message"), dict) else {}
        text = content_text(message.get("content"))
        usage = data.get("usage") if isinstance(data.get("usage"), dict) else {}
        tin, tout = count(usage.get("prompt_tokens")), count(usage.get("completion_tokens"))
        if tin is None or tout is None:
            # Some local servers omit usage; an estimate (4 characters a token) keeps token caps meaningful.
            tin = sum(len(m["content"]) for m in messages) // 4
            tout = len(text) // 4
        finish = choice.get("finish_reason")
        return Outcome(
            text=text,
            model=name,
            tokens_in=tin,
            tokens_out=tout,
            latency_s=time.monotonic() - start,
            retries=retries,
            finish_reason=finish if isinstance(finish, str) else None,
            notes=notes,
        )

    def _request(
        self,
        name: str,
        messages: Messages,
        json_mode: bool,
        schema: str | None,
        dialect: str | None,
        max_tokens: int | None,
    ) -> dict[str, Any]:
        kwargs: dict[str, Any] = {
            "model": name,
            "messages": messages,
            self.endpoint.max_tokens_param: max_tokens or self.sampling.max_output_tokens,
        }
        if self.sampling.reasoning_effort:
            kwargs["reasoning_effort"] = self.sampling.reasoning_effort
        # OpenAI's reasoning models reject any temperature once reasoning is on; elsewhere it is honoured.
        if not (self.sampling.reasoning_effort and self.endpoint.max_tokens_param == "max_completion_tokens"):
            kwargs["temperature"] = self.sampling.temperature
        if schema is not None and dialect is not None:
            kwargs["response_format"] = response_format(schema, dialect)
        elif json_mode and self.endpoint.json_mode and not self.refused:
            # After a refusal of structured output the call goes out in plain free text: an endpoint that
            # refuses one response format may refuse the other.
            kwargs["response_format"] = {"type": "json_object"}
        return kwargs

    # -- one attempt: bounded in time and in size ------------------------------------------------------------
    def _chat(self, kwargs: dict[str, Any], seconds: float, cancelled: threading.Event) -> dict[str, Any]:
        ctx = self._client().chat.completions.with_streaming_response.create(
            **kwargs, timeout=seconds, extra_headers=PLAIN
        )
        data = self._read(ctx, cancelled)
        choices = data.get("choices") if isinstance(data, dict) else None
        if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
            raise Malformed("the response has no choices")
        return data  # type: ignore[no-any-return]

    def _read(self, ctx: Any, cancelled: threading.Event) -> Any:
        return read_json(ctx, self.max_answer_bytes, cancelled)

    def _attempt_seconds(self) -> float:
        seconds = self.timeout_s
        if self.deadline is not None:
            seconds = min(seconds, self.deadline - time.monotonic())
        return seconds

    def _with_retries(
        self,
        attempt_fn: Callable[[float, threading.Event], Any],
        what: str,
        started: float | None = None,
        dialect: str | None = None,
        messages: Messages | None = None,
    ) -> tuple[Any, int]:
        import openai

        self._client()  # built (and `openai` imported) before any attempt's clock starts
        start = time.monotonic() if started is None else started
        attempt = 0
        while True:
            retry_after: float | None = None
            seconds = self._attempt_seconds()
            try:
                return run_with_deadline(attempt_fn, seconds, f"ksearch-llm-{what}"), attempt
            except openai.APIStatusError as exc:
                status = exc.status_code
                full = error_text(exc)
                cause = f"HTTP {status}: {short(full)}"
                if status < 500 and is_context_error(full):
                    raise ContextTooSmall(
                        self._scrub(context_message(what, full, messages)),
                        attempt,
                        time.monotonic() - start,
                    ) from None
                # llama-cpp-python's server (0.3.x) answers an unknown response format with a 500 that names it.
                if dialect is not None and (status in (400, 422) or (status == 500 and "response_format" in full)):
                    raise _Refused(cause, full, attempt) from None
                if status < 500 and status not in RETRY_STATUS:
                    raise CallFailed(
                        self._scrub(f"{what}: {cause} ({advice(status)})"), attempt, time.monotonic() - start
                    ) from None
                retry_after = retry_after_s(exc.response.headers if exc.response is not None else {})
            except TooLarge as exc:
                raise AnswerTooLarge(
                    self._scrub(f"{what}: {exc.describe(self.max_answer_bytes)}"),
                    attempt,
                    time.monotonic() - start,
                    size=exc.size,
                ) from None
            except (DeadlineExceeded, openai.APITimeoutError):
                cause = f"no complete answer within {max(seconds, 0):.3g} s (connect to last byte)"
            except openai.APIConnectionError as exc:
                cause = connection_cause(exc, self.endpoint.base_url)
            except Malformed as exc:
                cause = f"malformed response ({short(str(exc))})"
            except (openai.OpenAIError, ValueError) as exc:
                # A body that is not the JSON the SDK expects (a half-sent body).
                cause = f"malformed response ({type(exc).__name__}: {short(str(exc))})"
            if attempt >= self.max_retries:
                raise CallFailed(
                    self._scrub(f"{what}: {cause}; gave up after {attempt} retries"),
                    attempt,
                    time.monotonic() - start,
                ) from None
            delay = self.backoff.delay(attempt, self.rng, retry_after)
            if self.deadline is not None and time.monotonic() + delay >= self.deadline:
                raise CallFailed(
                    self._scrub(f"{what}: {cause}; no time left for a retry"), attempt, time.monotonic() - start
                ) from None
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


def connection_cause(exc: BaseException, base_url: str) -> str:
    """A failed connection in a few words, with what to do where its cause tells (no listener, no such host,
    TLS to a server that speaks plain HTTP)."""
    chain: list[BaseException] = []
    link: BaseException | None = exc
    while link is not None and link not in chain:
        chain.append(link)
        link = link.__cause__ or link.__context__
    hint = ""
    if any(isinstance(e, ConnectionRefusedError) for e in chain):
        hint = "; nothing listens there: start the server, or fix the port of the base URL"
    elif any(isinstance(e, socket.gaierror) for e in chain):
        hint = "; the host name does not resolve: check the base URL's host, and the network"
    elif any(isinstance(e, ssl.SSLError) for e in chain) and base_url.startswith("https:"):
        hint = "; a server that speaks plain HTTP takes an http:// base URL"
    return f"connection failed ({short(str(exc.__cause__ or exc))}{hint})"


class _Refused(KSearchError):
    """The endpoint refused the structured-output response format (HTTP 400/422)."""

    def __init__(self, cause: str, detail: str, retries: int) -> None:
        super().__init__(cause)
        self.cause = cause
        self.detail = detail
        self.retries = retries
