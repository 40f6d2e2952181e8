"""A linter diagnostic, shared by the fast checks (lint.py) and the compiler checks (deep.py)."""

from __future__ import annotations

from dataclasses import dataclass

from ksearch.knowledge.extract import KernelUse


@dataclass
class Diagnostic:
    severity: str  # "error" | "warning"
    code: str
    message: str
    line: int | None = None

    def __str__(self) -> str:
        where = f"line {self.line}: " if self.line is not None else ""
        return f"{self.severity} [{self.code}] {where}{self.message}"

    def to_json(self) -> dict[str, object]:
        return {"severity": self.severity, "code": self.code, "message": self.message, "line": self.line}


def py_line(k: KernelUse, body_line: int | None) -> int | None:
    """A body line mapped to the candidate file's line (only when the body is a plain string constant)."""
    if body_line is None:
        return k.source_line if k.source_line is not None else k.line
    return k.source_line + body_line - 1 if k.source_line is not None else k.line
