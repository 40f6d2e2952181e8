"""The API key: read once, then gone from the process environment, and redacted from everything the run keeps.

`take_key(NAME)` reads the key's value from the environment and, at once:
- removes it from the process environment: `os.environ` (which unsets it in the C environment too, so no child
  process inherits it) and Python's own copy of the start-up environment (`posix.environ`);
- overwrites the value in the environment block the process started with, which /proc/<pid>/environ shows for
  as long as the process lives (unsetting a variable does not touch that block);
- registers the value with the store's redaction (ksearch.store.redact), so it is replaced by `[redacted]` in
  run.db, the run's files, log records, and whatever the search hands to a prompt;
- remembers it for this process, so that a second client (`--resume` in the same process, `llm ping` after a
  run in a notebook) finds it.

The search takes its key when it makes its policy, before the harness starts any worker: a candidate's process
can then find the key neither in its environment nor in its parent's.

A mapping passed instead of the process environment (tests, embedding) is only read, never changed.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import sys
import threading
from collections.abc import Mapping

from ksearch.store.redact import register

_lock = threading.Lock()
#: Keys this process has taken out of its environment, by variable name.
_taken: dict[str, str] = {}


def take_key(name: str | None, environ: Mapping[str, str] | None = None) -> str | None:
    """The value of the variable `name` without surrounding whitespace (None when unset or blank), taken out of
    the process environment when `environ` is None or os.environ itself.

    The whitespace goes because a key read from a file keeps its line end (a Kubernetes or Docker secret made
    from a file, `$(cat keyfile)` of a file written on Windows: its `\r`), and the HTTP client refuses a header
    value that holds one, on every request."""
    if not name:
        return None
    if environ is not None and environ is not os.environ:
        value = (environ.get(name) or "").strip() or None
        register(value)
        return value
    with _lock:
        raw = os.environ.get(name)
        if raw is None:
            return _taken.get(name) or None
        _wipe_startup_environment(name)
        del os.environ[name]  # unsetenv() as well: no child process inherits it
        with contextlib.suppress(Exception):
            import posix

            posix.environ.pop(os.fsencode(name), None)  # the copy os.environ was built from
        value = raw.strip() or None
        if value:
            _taken[name] = value
    register(value)
    return value


def key_problem(name: str, environ: Mapping[str, str] | None = None) -> str | None:
    """Why the variable `name` holds no usable key ("unset", "empty", or what is wrong with its characters), None
    when it holds one; never the value itself. Checked before a run starts, as `take_key` would read it."""
    if environ is not None and environ is not os.environ:
        raw: str | None = environ.get(name)
    else:
        raw = os.environ.get(name, _taken.get(name))
    if raw is None:
        return "unset"
    value = raw.strip()
    if not value:
        return "empty" if not raw else "blank (only whitespace)"
    # An HTTP header carries printable ASCII only; a key never holds a space.
    odd = [c for c in value if not 33 <= ord(c) < 127]
    if odd:
        c = odd[0]
        what = "a space" if c == " " else "a control character" if ord(c) < 32 or ord(c) == 127 else (
            "a non-ASCII character")
        return f"set, but its value holds {what} inside it, which no API key has"
    return None


def register_present(names: list[str], environ: Mapping[str, str] | None = None) -> None:
    """Register the values of these variables for redaction without taking them (keys of other presets that
    happen to be set: nothing in the run should show them either)."""
    env = os.environ if environ is None else environ
    for name in names:
        register(env.get(name) or None)


def _wipe_startup_environment(name: str) -> None:
    """Overwrite the value of `name` in the C environment strings with NUL bytes, before unsetting it.

    A variable inherited at start-up lives in the block the kernel put on the process's stack, which
    /proc/<pid>/environ reads; unsetenv() only drops the pointer to it. Best effort: a platform without a
    reachable `environ` symbol keeps the bytes (the search also makes itself non-dumpable before running
    candidates, which hides /proc/<pid>/environ from other users' processes and from its own workers)."""
    if not sys.platform.startswith("linux"):
        return
    prefix = os.fsencode(name) + b"="
    with contextlib.suppress(Exception):
        libc = ctypes.CDLL(None)
        env = ctypes.POINTER(ctypes.c_void_p).in_dll(libc, "environ")
        i = 0
        while env[i]:
            addr = env[i]
            entry = ctypes.string_at(addr)
            if entry.startswith(prefix):
                ctypes.memset(addr + len(prefix), 0, len(entry) - len(prefix))
            i += 1
