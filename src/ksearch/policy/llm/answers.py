"""What comes back from an OpenAI-compatible endpoint: the body, read incrementally up to a size cap, and the
parts of answers and errors the client uses."""

from __future__ import annotations

import json
import threading
from typing import Any

from ksearch.policy.llm.context import BIGGER_CONTEXT, context_from_error
from ksearch.policy.llm.deadline import DeadlineExceeded
from ksearch.policy.llm.fitting import messages_tokens

#: How much of a refused answer is kept, to say what it was.
EXCERPT_BYTES = 200


def read_json(ctx: Any, cap: int, cancelled: threading.Event) -> Any:
    """The JSON body of a streamed SDK response (`with_streaming_response`), read chunk by chunk: refused with
    TooLarge past `cap` bytes (at once when the server announces more), DeadlineExceeded once `cancelled`."""
    buf = bytearray()
    with ctx as resp:
        declared = count(header(resp, "content-length"))
        if declared is not None and declared > cap:
            for chunk in resp.iter_bytes():  # a few bytes, to say what it was
                buf += chunk
                if len(buf) >= EXCERPT_BYTES:
                    break
            raise TooLarge(declared, bytes(buf[:EXCERPT_BYTES]), declared=True)
        for chunk in resp.iter_bytes():
            if cancelled.is_set():
                raise DeadlineExceeded()
            buf += chunk
            if len(buf) > cap:
                raise TooLarge(len(buf), bytes(buf[:EXCERPT_BYTES]), declared=False)
    try:
        return json.loads(bytes(buf))
    except (ValueError, RecursionError) as exc:
        # What the body is tells more than where the parser stopped: a proxy's HTML page, a server's plain text.
        start = short(bytes(buf[:EXCERPT_BYTES]).decode("utf-8", "replace"), 160)
        body = f"it begins {start!r}" if start else "the body is empty"
        raise Malformed(f"not JSON ({type(exc).__name__}: {short(str(exc), 120)}); {body}") from None


#: Asked of every response: no compression, so that the size cap counts the bytes that arrive.
PLAIN = {"Accept-Encoding": "identity"}


class Malformed(Exception):
    """The body is not the chat completion JSON expected (a proxy's HTML page, a half-sent body)."""


class TooLarge(Exception):
    def __init__(self, size: int, head: bytes, declared: bool) -> None:
        super().__init__(size)
        self.size = size
        self.head = head
        self.declared = declared

    def describe(self, cap: int) -> str:
        size = f"{self.size:,} bytes" if self.declared else f"more than {cap:,} bytes (reading stopped there)"
        start = short(self.head.decode("utf-8", "replace"), 160)
        return (
            f"the answer is too large: {size}, over the limit of {cap:,} bytes ([llm] max_answer_kb); "
            f"refused without parsing; it begins {start!r}"
        )


def header(resp: Any, name: str) -> str | None:
    http = getattr(resp, "http_response", None)
    headers = getattr(http, "headers", None) or getattr(resp, "headers", None) or {}
    try:
        value = headers.get(name)
    except AttributeError:
        return None
    return str(value) if value is not None else None


def count(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value if value >= 0 else None
    if isinstance(value, float) and value >= 0 and value == value and value != float("inf"):
        return int(value)
    if isinstance(value, str) and value.strip().isdigit() and len(value.strip()) <= 18:
        return int(value.strip())
    return None


def content_text(content: Any) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):  # content parts
        return "".join(str(p.get("text") or "") for p in content if isinstance(p, dict))
    return str(content)


def error_text(exc: Any, limit: int = 4000) -> str:
    """An HTTP error's message and body, bounded (newer SDKs keep only the message in str(exc))."""
    text = str(exc)
    body = getattr(exc, "body", None)
    if body is not None:
        extra = body[:limit] if isinstance(body, str) else json.dumps(body, default=str)[:limit]
        if extra not in text:
            text = f"{text} {extra}"
    return text[:limit]


def context_message(what: str, server_text: str, messages: list[dict[str, str]] | None) -> str:
    n = context_from_error(server_text)
    said = f"the server's context: {n} tokens" if n else f"the server says: {short(server_text, 160)}"
    size = f"; this prompt is about {messages_tokens(messages)} tokens" if messages else ""
    setting = f"[llm] context_tokens = {n}" if n else "[llm] context_tokens to the server's context"
    return (
        f"{what}: the prompt does not fit the model's context ({said}{size}): {BIGGER_CONTEXT}, or set "
        f"{setting} so that prompts are trimmed to fit"
    )


def short(text: str, limit: int = 300) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[:limit] + "..."


def retry_after_s(headers: Any) -> float | None:
    try:
        value = headers.get("retry-after")
        return float(value) if value is not None else None
    except (TypeError, ValueError):
        return None  # an HTTP date: rare from these APIs; backoff alone will do


def advice(status: int) -> str:
    if status in (401, 403):
        return "check the API key variable and that the key may use this model"
    if status == 404:
        return "check --base-url (it usually ends in /v1) and --model"
    return "the server refused the request; see its message"
