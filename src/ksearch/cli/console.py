"""The CLI's two consoles and its one way to refuse input.

Commands print results on `console` (stdout) and warnings on `err` (stderr). Bad input ends a command with
`fail(message)` or any UsageError raised below it: the app prints `error: <first line>` on stderr and exits 2
(ksearch.cli.app is the one place that does).
"""

from __future__ import annotations

from typing import NoReturn

from rich.console import Console
from rich.markup import escape

from ksearch.errors import UsageError
from ksearch.store.redact import redact

console = Console()
err = Console(stderr=True)


def fail(message: str) -> NoReturn:
    """Refuse the command's input: one line that says what to do, exit code 2."""
    raise UsageError(message)


def say(text: str, to: Console | None = None) -> None:
    """One line as it is: a path or a message with [brackets] is never read as markup (rich would style it, or fail
    on "[/...]" as a closing tag)."""
    (to or console).print(text, markup=False, highlight=False, soft_wrap=True)


def print_error(message: str) -> None:
    """`error: <message>` on stderr, the message taken literally (a path with [brackets] is not markup) and
    without any key this process has read."""
    err.print(f"[red]error:[/red] {escape(redact(message))}", highlight=False, soft_wrap=True)
