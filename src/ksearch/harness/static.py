"""Checks made on a candidate's source before anything runs: it parses, defines run(), uses no forbidden API."""

from __future__ import annotations

import ast
from dataclasses import dataclass

# Module paths folded to the short names tasks use in their forbidden lists.
CANONICAL = {"mlx.core": "mx", "mlx.nn": "nn", "mlx.core.fast": "mx.fast", "numpy": "np"}


@dataclass
class StaticVerdict:
    status: str | None  # None when the source may run; else compile_error / forbidden
    message: str = ""


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
        self.hits: list[tuple[int, str]] = []

    def _check(self, dotted: str, line: int) -> None:
        name = canonical(dotted)
        for f in self.forbidden:
            if name == f or name.startswith(f + "."):
                self.hits.append((line, f))

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
            self.hits.append((node.lineno, f"string {node.value!r}"))


def check_source(source: str, forbidden: tuple[str, ...] = ()) -> StaticVerdict:
    try:
        tree = ast.parse(source)
    except SyntaxError as exc:
        return StaticVerdict("compile_error", f"syntax error at line {exc.lineno}: {exc.msg}")
    finder = _Finder(tuple(forbidden))
    finder.visit(tree)
    if finder.hits:
        line, what = finder.hits[0]
        return StaticVerdict("forbidden", f"line {line}: uses forbidden API {what}; write the computation yourself")
    defines_run = any(
        (isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.name == "run")
        or (isinstance(n, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "run" for t in n.targets))
        or (isinstance(n, (ast.Import, ast.ImportFrom)) and any((a.asname or a.name) == "run" for a in n.names))
        for n in tree.body
    )
    if not defines_run:
        return StaticVerdict("compile_error", "the candidate defines no top-level run(**inputs)")
    return StaticVerdict(None)


def normalise_source(source: str) -> str:
    """Source with comments, docstrings' whitespace and formatting removed: equal for candidates that differ only
    cosmetically (used to skip duplicates)."""
    try:
        return ast.dump(ast.parse(source), annotate_fields=False, include_attributes=False)
    except SyntaxError:
        return " ".join(source.split())
