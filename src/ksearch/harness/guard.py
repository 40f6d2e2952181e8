"""Run-time guard for forbidden APIs inside the candidate's worker.

Static checks miss `getattr(mx.fast, "scaled_" + "dot_product_attention")`; here each forbidden function is replaced
by a tripwire that reports on a private channel to the parent the moment it is called (so catching the exception in
the candidate does not hide the call) and then raises.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Callable
from typing import Any

from ksearch.errors import ForbiddenAPIError

ROOTS = {"mx": "mlx.core", "nn": "mlx.nn", "np": "numpy"}


def _resolve(dotted: str) -> tuple[Any, str] | None:
    head, *rest = dotted.split(".")
    module_name = ROOTS.get(head, head)
    try:
        obj: Any = importlib.import_module(module_name)
    except ImportError:
        return None
    for part in rest[:-1]:
        if not hasattr(obj, part):
            return None
        obj = getattr(obj, part)
    return obj, rest[-1] if rest else head


def install(forbidden: tuple[str, ...], report_fd: int | None) -> list[str]:
    """Install tripwires; returns the names that could be guarded."""
    write: Callable[[int, bytes], int] = os.write
    guarded = []
    for dotted in forbidden:
        found = _resolve(dotted)
        if found is None:
            continue
        owner, attr = found
        if not hasattr(owner, attr):
            continue

        def tripwire(*_a: Any, _name: str = dotted, **_k: Any) -> Any:
            if report_fd is not None:
                # Plain try/except, not contextlib.suppress: the tripwire must not look anything up in a module the
                # candidate could have patched (a patched `suppress` that raises would skip the report).
                try:  # noqa: SIM105
                    write(report_fd, (_name + "\n").encode())
                except OSError:
                    pass
            raise ForbiddenAPIError(f"forbidden API {_name} was called")

        try:
            setattr(owner, attr, tripwire)
            guarded.append(dotted)
        except (AttributeError, TypeError):
            continue
    return guarded
