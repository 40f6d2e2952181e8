"""The exhaustive kernel sets behind KSEARCH_TEST_FULL=1 (`make test-full`): `make test` compiles an even spread of
each set (its first and last members included), which keeps CI's suite inside its time; the full sets compile every
configuration (minutes of nvcc on 2 cores)."""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import TypeVar

T = TypeVar("T")

FULL = os.environ.get("KSEARCH_TEST_FULL", "") not in ("", "0")


def spread(items: Sequence[T], k: int) -> list[T]:
    """All of `items` under KSEARCH_TEST_FULL=1 or when there are at most k; otherwise k of them evenly spaced."""
    items = list(items)
    if FULL or len(items) <= k:
        return items
    return [items[round(i * (len(items) - 1) / (k - 1))] for i in range(k)]
