"""A hard deadline for blocking network work, however slowly the other side sends.

HTTP clients time each read, not the whole exchange: a server that drips one byte a second keeps a request
alive forever under a 10 s read timeout. Here the work runs in a daemon thread and the caller waits for it at
most `seconds`; past that the caller gets DeadlineExceeded at once and the work is told to stop (it is left
to finish on its own, bounded by its own read timeouts, holding nothing the caller still needs).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")


class DeadlineExceeded(Exception):
    pass


def run_with_deadline(work: Callable[[float, threading.Event], T], seconds: float, name: str = "ksearch-llm") -> T:
    """`work(seconds, cancelled)` in a daemon thread; its result or its exception, or DeadlineExceeded after
    `seconds`. `work` should check `cancelled` between reads and give up when it is set."""
    if seconds <= 0:
        raise DeadlineExceeded()
    box: dict[str, Any] = {}
    done = threading.Event()
    cancelled = threading.Event()

    def run() -> None:
        try:
            box["value"] = work(seconds, cancelled)
        except BaseException as exc:  # handed to the caller as is
            box["error"] = exc
        finally:
            done.set()

    threading.Thread(target=run, name=name, daemon=True).start()
    if not done.wait(seconds):
        cancelled.set()
        raise DeadlineExceeded()
    if "error" in box:
        raise box["error"]
    return box["value"]  # type: ignore[no-any-return]
