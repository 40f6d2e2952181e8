"""A command's output paths (a folder, or a file's folder) checked before minutes of work, not after: made here, or
one line."""

from __future__ import annotations

from pathlib import Path

import typer

from ksearch.store import folder_problem


def check_out_dir(out: str | Path, flag: str = "--out") -> None:
    problem = folder_problem(out)
    if problem is not None:
        raise typer.BadParameter(f"{str(out)!r} {problem}; pass a writable {flag}", param_hint=flag)


def check_out_file(path: str | Path, flag: str) -> None:
    parent = Path(path).parent
    problem = folder_problem(parent)
    if problem is not None:
        raise typer.BadParameter(f"cannot write {str(path)!r}: its folder {str(parent)!r} {problem}; pass another "
                                 f"{flag}", param_hint=flag)
