"""A command's output paths (a folder, or a file's folder) checked before minutes of work, not after: made here, or
one line. The write itself can still fail (the folder changed since, the disk filled): `writing` makes that one line
too."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import typer

from ksearch.cli.console import fail
from ksearch.store import folder_problem


def check_out_dir(out: str | Path, flag: str = "--out") -> None:
    problem = folder_problem(out)
    if problem is not None:
        raise typer.BadParameter(f"{str(out)!r} {problem}; pass a writable {flag}", param_hint=flag)


def check_out_file(path: str | Path, flag: str, example: str = "out.txt") -> None:
    """`path` can be written as a file: not a directory, in a folder that is there (made here) and writable.
    `example` is a file name the message suggests inside a directory given by mistake."""
    path = Path(path)
    if path.is_dir():
        raise typer.BadParameter(f"{str(path)!r} is a directory; name a file, e.g. {str(path / example)!r}",
                                 param_hint=flag)
    parent = path.parent
    problem = folder_problem(parent)
    if problem is not None:
        raise typer.BadParameter(f"cannot write {str(path)!r}: its folder {str(parent)!r} {problem}; pass another "
                                 f"{flag}", param_hint=flag)


@contextmanager
def writing(path: str | Path, flag: str) -> Iterator[None]:
    """Writes to `path` in the block: an OSError is the command's one line (exit 2), not a traceback."""
    try:
        yield
    except OSError as exc:
        fail(f"cannot write {path}: {exc.strerror or exc}; pass another {flag}")
