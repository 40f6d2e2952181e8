"""Secrets out of every text a run keeps or shows: redaction by value.

The search process registers the value of every key it reads (`SECRETS.add`, done by the LLM policy when it takes
its key from the environment); from then on, every occurrence of that value is replaced by `[redacted]` in:

- everything RunStore writes (run.db: calls' prompts, responses and errors, evaluations, events, meta with the
  configuration and the loop state; candidate files, best.py, world_model.json, config.json), so that no report,
  export or later prompt built from the store can carry it;
- every log record of this process (a record factory: the message, its arguments and a traceback's text);
- whatever a caller passes through `redact` / `redact_json` (a verdict before it reaches a prompt, an event before
  the live view shows it).

It lives in the store's room so that every room that writes or shows run data (search, report, cli) can use it,
and the store applies it at its write boundary whoever calls it. Values shorter than MIN_CHARS are not registered:
no real API key is that short, and replacing a short common string everywhere would corrupt code and prompts.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Iterable
from typing import Any

MASK = "[redacted]"
#: Shorter values are never registered (see the module's docstring).
MIN_CHARS = 8


class Redactor:
    """A set of secret values and the replacement of each by MASK."""

    def __init__(self, secrets: Iterable[str | None] = ()) -> None:
        self._lock = threading.Lock()
        self._forms: tuple[str, ...] = ()
        for s in secrets:
            self.add(s)

    def add(self, secret: str | None) -> bool:
        """Register a value; False (and nothing registered) for None or a value shorter than MIN_CHARS."""
        if not secret or len(secret) < MIN_CHARS:
            return False
        # The value as written, and as it appears inside a JSON string (escaped), so that redacting a
        # serialised document finds it either way. Longest first: one secret may contain another.
        forms = {secret, json.dumps(secret)[1:-1], json.dumps(secret, ensure_ascii=False)[1:-1]}
        with self._lock:
            self._forms = tuple(sorted(set(self._forms) | forms, key=len, reverse=True))
        return True

    def copy(self) -> Redactor:
        """Another Redactor with the same secrets, to add more to without touching this one."""
        other = Redactor()
        other._forms = self._forms
        return other

    def __bool__(self) -> bool:
        return bool(self._forms)

    def __contains__(self, value: object) -> bool:
        return isinstance(value, str) and value in self._forms

    def text(self, text: str) -> str:
        for form in self._forms:
            if form in text:
                text = text.replace(form, MASK)
        return text

    def json(self, value: Any) -> Any:
        """A JSON-able value with every string in it redacted (keys too); the value itself when nothing is
        registered or nothing matched."""
        if not self._forms:
            return value
        text = json.dumps(value, default=str)
        clean = self.text(text)
        return value if clean == text else json.loads(clean)


#: This process's secrets. The LLM policy registers each key it takes; RunStore and the log records use these.
SECRETS = Redactor()


def redact(text: str, secrets: Redactor | None = None) -> str:
    """`text` without any registered secret (SECRETS unless given)."""
    return (SECRETS if secrets is None else secrets).text(text)


def redact_json(value: Any, secrets: Redactor | None = None) -> Any:
    return (SECRETS if secrets is None else secrets).json(value)


def register(secret: str | None) -> bool:
    """Add a secret to this process's SECRETS and make sure log records are redacted from now on."""
    added = SECRETS.add(secret)
    if added:
        _redact_log_records()
    return added


_installed = False


def _redact_log_records() -> None:
    """Wrap the log record factory once: a record's message is rendered and redacted when it is made, and so is
    the text of its traceback (the formatter keeps an exc_text it finds instead of formatting exc_info again)."""
    global _installed
    with SECRETS._lock:
        if _installed:
            return
        _installed = True
    make = logging.getLogRecordFactory()

    def factory(*args: Any, **kwargs: Any) -> logging.LogRecord:
        record = make(*args, **kwargs)
        if not SECRETS:
            return record
        try:
            message = record.getMessage()
        except Exception:  # a malformed format string: leave it to the handler to report
            return record
        record.msg, record.args = SECRETS.text(message), None
        if record.exc_info and not record.exc_text:
            record.exc_text = SECRETS.text(logging.Formatter().formatException(record.exc_info))
        return record

    logging.setLogRecordFactory(factory)
