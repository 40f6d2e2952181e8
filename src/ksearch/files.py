"""Files a user names on the command line (a candidate, a CUDA source, a run configuration): whether a path names a
file, and its text, with every refusal one line that names the file.

This module imports only ksearch.errors: every room may use it.
"""

from __future__ import annotations

from pathlib import Path

from ksearch.errors import UsageError


def file_problem(path: str | Path) -> str | None:
    """Why `path` cannot be read as a file (None: it can), as the end of a sentence naming it."""
    p = Path(path)
    if p.is_dir():
        return "is a directory; name a file"
    if not p.is_file():
        return "does not exist"
    return None


def read_text(path: str | Path, what: str, error: type[UsageError] = UsageError) -> str:
    """The UTF-8 text of the file a user named as `what` ("candidate file", "config file", ...). A path that is no
    file, a file this process may not read and bytes that are not UTF-8 raise `error`, one line naming the file."""
    problem = file_problem(path)
    if problem is not None:
        raise error(f"{what} {path} {problem}")
    try:
        return Path(path).read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        byte = exc.object[exc.start:exc.start + 1].hex()
        raise error(f"cannot read {what} {path}: it is not UTF-8 text (byte 0x{byte} at offset {exc.start}); "
                    "save it as UTF-8") from exc
    except OSError as exc:
        raise error(f"cannot read {what} {path}: {exc.strerror or exc}") from exc
