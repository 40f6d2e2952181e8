"""The harness's words, made the same every time before they are fed back to a proposer.

A verdict's message quotes what the candidate's process printed: a traceback names the worker's scratch
directory (a fresh random name per evaluation), a crash names a PID or a memory address, a timing check names the
seconds it measured. None of it helps a model, and all of it changes between two evaluations of the same code,
which would make every later prompt differ from its recording: `ksearch run --replay RUN --reevaluate` could not
get past the first failed candidate. So the feedback a policy sees (Feedback.message, Attempt.message) goes
through `stable_text`; the stored verdict (evaluations.message) keeps the original.
"""

from __future__ import annotations

import os
import re
import tempfile
from functools import cache


@cache
def _temp_roots() -> tuple[str, ...]:
    roots = {tempfile.gettempdir(), "/tmp", "/var/tmp", "/dev/shm", "/private/tmp"}
    roots |= {os.path.realpath(r) for r in list(roots)}
    # Longest first, so that /private/var/folders/.../T wins over a shorter root it contains.
    return tuple(sorted((r.rstrip("/") for r in roots if r and r != "/"), key=len, reverse=True))


@cache
def _patterns() -> tuple[tuple[re.Pattern[str], str], ...]:
    roots = "|".join(re.escape(r) for r in _temp_roots())
    return (
        # A file or directory directly under a temporary directory: the random part of every scratch path.
        (re.compile(rf"(?:{roots})/[^\s/'\"`()\[\]<>,;:]+"), "<tmp>"),
        # tempfile's random names met elsewhere (tmpk3j_2x9a.py, ksearch-candidate-q1w2e3r4).
        (re.compile(r"\btmp[a-z0-9_]{8}\b"), "tmp<name>"),
        (re.compile(r"\bksearch-([a-z]+)-[a-z0-9_]{8}\b"), r"ksearch-\1-<name>"),
        # Addresses of objects and frames (<function run at 0x7f3a9c2b1d30>, Current thread 0x00007f...).
        (re.compile(r"\b0x[0-9a-fA-F]{8,16}\b"), "0x<addr>"),
        # Process ids.
        (re.compile(r"(?i)\b(pid|process|worker)(\s*[=:#]?\s*)\d+\b"), r"\1\2<pid>"),
        # Measured durations (a limit is a whole number and stays: "exceeded the 10s time limit").
        (re.compile(r"\b\d+(?:\.\d+(?:e[-+]?\d+)?|e[-+]?\d+)(\s?)(s|ms|us|µs|ns|sec|secs|seconds)\b"), r"<t>\1\2"),
    )


def stable_text(text: str) -> str:
    """`text` with its run-to-run noise replaced by placeholders: scratch paths and temporary names (<tmp>),
    memory addresses (0x<addr>), process ids (<pid>) and measured durations (<t> s)."""
    if not text:
        return text
    for pattern, replacement in _patterns():
        text = pattern.sub(replacement, text)
    return text
