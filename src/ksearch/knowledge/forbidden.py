"""The forbidden-API scan: where a candidate's source names an API its task forbids.

One scan per candidate: the harness runs it with its static checks and hands the result to the linter
(`lint_source(..., forbidden_uses=...)`), which scans by itself only when called on its own (`ksearch lint`).
"""

from __future__ import annotations

import ast
from collections.abc import Sequence
from dataclasses import dataclass

# Module paths folded to the short names tasks use in their forbidden lists.
CANONICAL = {"mlx.core": "mx", "mlx.nn": "nn", "mlx.core.fast": "mx.fast", "numpy": "np"}


@dataclass(frozen=True)
class ForbiddenUse:
    line: int
    what: str  # the forbidden name as the task lists it, or "string '<leaf>'" for a name spelled in a string

    @property
    def message(self) -> str:
        return f"uses forbidden API {self.what}; write the computation yourself"


def canonical(dotted: str) -> str:
    for long, short in sorted(CANONICAL.items(), key=lambda kv: -len(kv[0])):
        if dotted == long or dotted.startswith(long + "."):
            return short + dotted[len(long):]
    return dotted


class _Finder(ast.NodeVisitor):
    def __init__(self, forbidden: tuple[str, ...]) -> None:
        self.forbidden = forbidden
        self.leaves = {f.rsplit(".", 1)[-1] for f in forbidden}
        self.aliases: dict[str, str] = {}
        self.hits: list[ForbiddenUse] = []

    def _check(self, dotted: str, line: int) -> None:
        name = canonical(dotted)
        for f in self.forbidden:
            if name == f or name.startswith(f + "."):
                self.hits.append(ForbiddenUse(line, f))

    def visit_Import(self, node: ast.Import) -> None:
        for a in node.names:
            self.aliases[a.asname or a.name.split(".")[0]] = a.name if a.asname else a.name.split(".")[0]
            self._check(a.name, node.lineno)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        for a in node.names:
            full = f"{node.module}.{a.name}" if node.module else a.name
            self.aliases[a.asname or a.name] = full
            self._check(full, node.lineno)

    def _dotted(self, node: ast.AST) -> str | None:
        parts = []
        while isinstance(node, ast.Attribute):
            parts.append(node.attr)
            node = node.value
        if isinstance(node, ast.Name):
            parts.append(self.aliases.get(node.id, node.id))
            return ".".join(reversed(parts))
        return None

    def visit_Attribute(self, node: ast.Attribute) -> None:
        dotted = self._dotted(node)
        if dotted:
            self._check(dotted, node.lineno)
        self.generic_visit(node)

    def visit_Name(self, node: ast.Name) -> None:
        if node.id in self.aliases:
            self._check(self.aliases[node.id], node.lineno)

    def visit_Constant(self, node: ast.Constant) -> None:
        # getattr(mx.fast, "scaled_dot_product_attention") names the API in a string.
        if isinstance(node.value, str) and node.value in self.leaves:
            self.hits.append(ForbiddenUse(node.lineno, f"string {node.value!r}"))


def scan_forbidden(tree: ast.AST, forbidden: Sequence[str]) -> list[ForbiddenUse]:
    """Every use of a forbidden API in a parsed candidate, in the order the scan meets them."""
    if not forbidden:
        return []
    finder = _Finder(tuple(forbidden))
    finder.visit(tree)
    return finder.hits
