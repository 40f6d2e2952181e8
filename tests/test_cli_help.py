"""Every command's --help: flags shown as flags, descriptions as paragraphs rather than the source's line breaks."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import typer
from typer.testing import CliRunner

from ksearch.cli.app import app

RUNNER = CliRunner()


def _commands(command: Any, path: list[str]) -> Iterator[tuple[list[str], Any]]:
    # typer 0.28 brings its own copy of click, whose classes are not the installed click's: walked by attribute.
    yield path, command
    for name, sub in getattr(command, "commands", {}).items():
        yield from _commands(sub, [*path, name])


COMMANDS = list(_commands(typer.main.get_command(app), []))


def _help(path: list[str]) -> str:
    res = RUNNER.invoke(app, [*path, "--help"], env={"COLUMNS": "400", "NO_COLOR": "1"})
    assert res.exit_code == 0, res.output
    return res.output


def test_every_command_is_walked() -> None:
    names = {" ".join(path) for path, _ in COMMANDS}
    assert {"", "run", "eval", "bench decode", "llm ping"} <= names and len(names) > 20


def test_a_flag_takes_no_value_and_its_help_shows_none() -> None:
    # typer 0.29 prints "<bool>" beside each flag, as if `--json true` were asked for (it is an error).
    for path, command in COMMANDS:
        flags = [p for p in command.params if getattr(p, "is_flag", False)]
        if not flags:
            continue
        text = _help(path)
        for flag in flags:
            line = next(ln for ln in text.splitlines() if flag.opts[0] in ln)
            assert "<bool>" not in line, f"ksearch {' '.join(path)}: {line.strip()}"


def test_a_description_is_one_paragraph_not_the_docstrings_line_breaks() -> None:
    # The docstrings wrap at 120 columns; the help reflows them. typer 0.29 kept the breaks in a group's list of
    # commands: a line ended mid-sentence, its rest on the next line under a gap.
    for path, command in COMMANDS:
        text = _help(path)
        lines = [re.sub(r"\s+", " ", ln.strip(" │")) for ln in text.splitlines()]
        described = [command, *getattr(command, "commands", {}).values()]
        for each in described:
            # markdown shows `code` without its backticks
            first = re.sub(r"\s+", " ", (each.help or "").split("\n\n")[0].replace("`", "")).strip()
            assert any(first in ln for ln in lines), f"ksearch {' '.join(path)}: {first!r} is not on one line"


def test_the_help_keeps_every_word_markdown_could_take() -> None:
    # In markdown mode "<name>" reads as an HTML tag and "*" as emphasis: a placeholder or a file pattern written
    # so vanished from the help. Placeholders are written in capitals, patterns as `code`.
    for path, command in COMMANDS:
        shown = re.sub(r"\s+", " ", _help(path).replace("│", " "))
        for text in [command.help or "", *(getattr(p, "help", None) or "" for p in command.params)]:
            for word in re.sub(r"\s+", " ", text.replace("`", "")).split():
                assert word in shown, f"ksearch {' '.join(path)}: {word!r} is not in its help"


def test_every_option_has_a_description() -> None:
    for path, command in COMMANDS:
        for param in command.params:
            if getattr(param, "param_type_name", "") == "option" and not param.help:
                raise AssertionError(f"ksearch {' '.join(path)} {param.opts[0]}: no help text")


def test_the_json_flags_of_tasks_and_backends_say_what_they_print() -> None:
    """Each prints one JSON array (an object per task or backend), not the one object `ksearch eval --json` prints."""
    for command, each in (("tasks", "one object per task"), ("backends", "one object per backend")):
        text = " ".join(_help([command]).split())
        assert f"--json Print exactly one JSON array: {each}" in text, text
