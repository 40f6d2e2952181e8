"""A command's output paths (a folder, or a file's folder) checked before minutes of work, not after: made here, or
one line."""

from __future__ import annotations

import os
from pathlib import Path

import typer


def check_out_dir(out: str | Path, flag: str = "--out") -> None:
    if Path(out).exists() and not Path(out).is_dir():
        raise typer.BadParameter(f"{str(out)!r} is a file, not a directory; pass a directory as {flag}",
                                 param_hint=flag)
    try:
        Path(out).mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise typer.BadParameter(f"cannot create {str(out)!r} ({exc.strerror}); pass a writable {flag}",
                                 param_hint=flag) from exc
    if not os.access(out, os.W_OK):
        raise typer.BadParameter(f"{str(out)!r} is not writable; pass a writable {flag}", param_hint=flag)


def check_out_file(path: str | Path, flag: str) -> None:
    """A file's folder, created here if missing, before the work that fills the file."""
    parent = Path(path).parent
    blocker = next((a for a in (parent, *parent.parents) if a.exists()), None)
    if blocker is not None and not blocker.is_dir():
        raise typer.BadParameter(f"cannot write {str(path)!r}: {str(blocker)!r} is a file, not a folder; pass another "
                                 f"{flag}", param_hint=flag)
    try:
        parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise typer.BadParameter(f"cannot write {str(path)!r}: its folder cannot be made ({exc.strerror}); pass "
                                 f"another {flag}", param_hint=flag) from exc
    if not os.access(parent, os.W_OK):
        raise typer.BadParameter(f"cannot write {str(path)!r}: {str(parent)!r} is not writable; pass another {flag}",
                                 param_hint=flag)
