"""Checks made on a candidate's source before anything runs: it parses, defines run(), uses no forbidden API."""

from __future__ import annotations

import ast
from dataclasses import dataclass, field

from ksearch.knowledge.entry import run_bindings
from ksearch.knowledge.forbidden import ForbiddenUse, scan_forbidden


@dataclass
class StaticVerdict:
    status: str | None  # None when the source may run; else compile_error / forbidden
    message: str = ""
    forbidden: list[ForbiddenUse] = field(default_factory=list)  # the scan's result, handed on to the linter


def check_source(source: str, forbidden: tuple[str, ...] = ()) -> StaticVerdict:
    if "\0" in source:  # the parser refuses it with no line to point at
        line = source.count("\n", 0, source.index("\0")) + 1
        return StaticVerdict("compile_error", f"the source contains a NUL byte (line {line}); a candidate is Python "
                                              "text")
    try:
        tree = ast.parse(source)
    except SyntaxError as exc:
        where = "" if exc.lineno is None else f" at line {exc.lineno}"
        return StaticVerdict("compile_error", f"syntax error{where}: {exc.msg}")
    uses = scan_forbidden(tree, forbidden)
    if uses:
        return StaticVerdict("forbidden", f"line {uses[0].line}: {uses[0].message}", uses)
    if not run_bindings(tree):
        return StaticVerdict("compile_error", "the candidate defines no top-level run(**inputs)")
    return StaticVerdict(None)


def normalise_source(source: str) -> str:
    """Source with comments, docstrings' whitespace and formatting removed: equal for candidates that differ only
    cosmetically (used to skip duplicates)."""
    try:
        return ast.dump(ast.parse(source), annotate_fields=False, include_attributes=False)
    except SyntaxError:
        return " ".join(source.split())
