"""A command's output directory checked before minutes of work, not after: created here, or one line."""

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
