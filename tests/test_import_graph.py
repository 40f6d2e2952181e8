"""The import graph of src/ksearch runs one way.

Every module is parsed with `ast`; every import counts, wherever it stands (module level, inside a function,
under TYPE_CHECKING), relative imports are resolved, and `importlib.import_module` registries count too (a
module that calls import_module imports each ksearch module it names in a string literal). Three rules:

(a) no circle between modules;
(b) a room (a subpackage or top-level module of ksearch) imports only from itself or from rooms of a lower
    layer (LAYERS); rooms on one layer may import each other, but not in a circle; a room missing from LAYERS
    fails, so a new room has to be placed;
(c) only the cli room imports typer or ksearch.cli.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from itertools import pairwise
from pathlib import Path

SRC = Path(__file__).resolve().parent.parent / "src"

# Lowest first. "__init__" is the ksearch package module itself (version only).
LAYERS: tuple[tuple[str, ...], ...] = (
    ("errors", "__init__", "files"),
    ("config",),
    ("tasks", "backends"),
    ("kernels",),
    ("integrations",),
    ("models",),
    ("knowledge",),
    ("metalemu",),
    ("harness",),
    ("store",),
    ("worldmodel",),
    ("policy",),
    ("search",),
    ("report",),
    ("bench",),
    ("cli",),
)
CLI_ROOM = "cli"
CLI_ONLY = ("typer",)  # third-party packages only the cli room may import (besides ksearch.cli itself)


@dataclass
class Graph:
    package: str
    modules: dict[str, Path] = field(default_factory=dict)
    # importer -> imported -> first line that imports it (internal modules, or a top-level external name)
    edges: dict[str, dict[str, int]] = field(default_factory=dict)


def _module_name(path: Path, root: Path) -> str:
    parts = path.relative_to(root).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _resolve_from(module: str, is_package: bool, node: ast.ImportFrom) -> str:
    if not node.level:
        return node.module or ""
    parts = module.split(".") if is_package else module.split(".")[:-1]
    base = parts[: len(parts) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def _calls_import_module(tree: ast.AST) -> bool:
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            f = node.func
            if (isinstance(f, ast.Attribute) and f.attr == "import_module") or (
                    isinstance(f, ast.Name) and f.id == "import_module"):
                return True
    return False


def _imported_names(mod: str, path: Path, modules: dict[str, Path]) -> list[tuple[str, int]]:
    """Every dotted name the module imports, with its line, before resolving it to a module."""
    tree = ast.parse(path.read_text(), filename=str(path))
    out: list[tuple[str, int]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [(alias.name, node.lineno) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = _resolve_from(mod, path.name == "__init__.py", node)
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                out.append((sub if sub in modules else base, node.lineno))
    if _calls_import_module(tree):
        out += [(node.value, node.lineno) for node in ast.walk(tree)
                if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in modules]
    return out


def build_graph(root: Path, package: str) -> Graph:
    """Parse every module under root/package and record what each one imports."""
    g = Graph(package)
    for path in sorted((root / package).rglob("*.py")):
        g.modules[_module_name(path, root)] = path

    def target(name: str) -> str:
        # the most specific module of ours that `name` denotes, else the top-level (external) name
        parts = name.split(".")
        for n in range(len(parts), 0, -1):
            if ".".join(parts[:n]) in g.modules:
                return ".".join(parts[:n])
        return parts[0]

    for mod, path in g.modules.items():
        out: dict[str, int] = {}
        for name, line in _imported_names(mod, path, g.modules):
            t = target(name)
            if t and t != mod:
                out[t] = min(out.get(t, line), line)
        g.edges[mod] = out
    return g


def room_of(module: str, package: str) -> str:
    parts = module.split(".")
    return "__init__" if len(parts) == 1 else parts[1]


def _sccs(nodes: Iterable[str], edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one node (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    out: list[list[str]] = []
    counter = 0
    for start in sorted(nodes):
        if start in index:
            continue
        work: list[tuple[str, Iterable[str]]] = [(start, iter(sorted(edges.get(start, ()))))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            v, it = work[-1]
            for w in it:
                if w not in index:
                    index[w] = low[w] = counter
                    counter += 1
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(sorted(edges.get(w, ())))))
                    break
                if w in on_stack:
                    low[v] = min(low[v], index[w])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[v])
                if low[v] == index[v]:
                    comp = []
                    while True:
                        w = stack.pop()
                        on_stack.discard(w)
                        comp.append(w)
                        if w == v:
                            break
                    if len(comp) > 1:
                        out.append(sorted(comp))
    return out


def _cycle_path(comp: Sequence[str], edges: dict[str, set[str]]) -> list[str]:
    """One shortest circle through the first member of a component, for the message."""
    members = set(comp)
    start = comp[0]
    prev: dict[str, str] = {}
    frontier = [start]
    while frontier:
        nxt = []
        for v in frontier:
            for w in sorted(edges.get(v, ())):
                if w not in members:
                    continue
                if w == start:
                    path = [v]
                    while path[-1] != start:
                        path.append(prev[path[-1]])
                    return [*reversed(path), start]
                if w not in prev:
                    prev[w] = v
                    nxt.append(w)
        frontier = nxt
    return [start]


def where_room(g: Graph, room: str) -> str:
    mods = [m for m in g.modules if room_of(m, g.package) == room]
    return ", ".join(sorted(mods)[:3]) + (", ..." if len(mods) > 3 else "")


def check(g: Graph, layers: Sequence[Sequence[str]], cli_room: str, cli_only: Sequence[str]) -> dict[str, str]:
    """Every violation: a stable key -> a message naming the import lines."""
    layer = {room: i for i, rooms in enumerate(layers) for room in rooms}
    internal = {m: {t for t in ts if t in g.modules} for m, ts in g.edges.items()}
    found: dict[str, str] = {}

    def where(a: str, b: str) -> str:
        return f"{g.modules[a].relative_to(g.modules[g.package].parent.parent)}:{g.edges[a][b]}"

    # (a) circles between modules
    for comp in _sccs(g.modules, internal):
        path = _cycle_path(comp, internal)
        steps = ", ".join(f"{a} -> {b} ({where(a, b)})" for a, b in pairwise(path))
        found["circle among: " + ", ".join(comp)] = f"import circle: {steps}"

    # (b) layers
    room_edges: dict[str, set[str]] = {}
    first_import: dict[tuple[str, str], tuple[str, str]] = {}
    for mod in sorted(g.modules):
        src = room_of(mod, g.package)
        if src not in layer:
            found[f"unknown room: {src}"] = f"room {src!r} ({where_room(g, src)}) is not placed in LAYERS"
            continue
        for t in sorted(internal[mod]):
            dst = room_of(t, g.package)
            if dst == src or dst not in layer:
                continue
            if layer[dst] == layer[src]:  # a circle across layers has an upward import, reported below
                room_edges.setdefault(src, set()).add(dst)
                first_import.setdefault((src, dst), (mod, t))
            elif layer[dst] > layer[src]:
                found[f"upward: {mod} -> {t}"] = (
                    f"{mod} (layer {layer[src]}, {src}) imports {t} (layer {layer[dst]}, {dst}) at {where(mod, t)}")
    for comp in _sccs(room_edges, room_edges):
        path = _cycle_path(comp, room_edges)
        steps = ", ".join(f"{a} -> {b} ({first_import[(a, b)][0]} imports {first_import[(a, b)][1]})"
                          for a, b in pairwise(path))
        found["room circle among: " + ", ".join(comp)] = f"rooms import each other in a circle: {steps}"

    # (c) the CLI's own dependencies
    cli_module = f"{g.package}.{cli_room}"
    for mod in sorted(g.modules):
        if room_of(mod, g.package) == cli_room:
            continue
        for t in sorted(g.edges[mod]):
            if t in cli_only or t == cli_module or t.startswith(cli_module + "."):
                name = t if t in cli_only else cli_module
                found[f"cli only: {mod} imports {name}"] = f"{mod} imports {t} at {where(mod, t)}"
    return found


def test_import_graph_runs_one_way() -> None:
    g = build_graph(SRC, "ksearch")
    found = check(g, LAYERS, CLI_ROOM, CLI_ONLY)
    assert not found, "import rules broken:\n" + "\n".join(f"  {found[k]}" for k in sorted(found))


def test_layers_name_each_room_once() -> None:
    # a room listed twice would have two layers
    rooms = [r for rs in LAYERS for r in rs]
    assert len(rooms) == len(set(rooms))


def _write(root: Path, files: dict[str, str]) -> None:
    for rel, text in files.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)


def test_checker_catches_planted_violations(tmp_path: Path) -> None:
    _write(tmp_path, {
        "pkg/__init__.py": "",
        "pkg/low/__init__.py": "",
        # circle low.a -> low.b -> low.a, the second edge inside a function and relative
        "pkg/low/a.py": "from pkg.low import b\n",
        "pkg/low/b.py": "def f():\n    from . import a\n    return a\n",
        # upward import hidden under TYPE_CHECKING
        "pkg/low/c.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from ..high.d import X\n",
        "pkg/high/__init__.py": "",
        "pkg/high/d.py": "import pkg.low.c\nX = 1\n",
        # typer outside the cli room, and a module importing the cli
        "pkg/high/e.py": "def g():\n    import typer\n    import pkg.cli.main\n",
        "pkg/cli/__init__.py": "import typer\n",
        "pkg/cli/main.py": "import importlib\nimportlib.import_module('pkg.high.e')\n",
        # a room nobody placed
        "pkg/stray.py": "",
        # same-layer rooms importing each other in a circle
        "pkg/left.py": "import pkg.right\n",
        "pkg/right.py": "import pkg.left.x\n",
    })
    g = build_graph(tmp_path, "pkg")
    layers = (("__init__",), ("low",), ("high",), ("left", "right"), ("cli",))
    found = check(g, layers, "cli", ("typer",))
    assert set(found) == {
        "circle among: pkg.low.a, pkg.low.b",
        "circle among: pkg.high.d, pkg.low.c",
        "upward: pkg.low.c -> pkg.high.d",
        "cli only: pkg.high.e imports typer",
        "cli only: pkg.high.e imports pkg.cli",
        "circle among: pkg.cli.main, pkg.high.e",
        "upward: pkg.high.e -> pkg.cli.main",
        "unknown room: stray",
        "circle among: pkg.left, pkg.right",
        "room circle among: left, right",
    }, found
    assert "pkg/low/b.py:2" in found["circle among: pkg.low.a, pkg.low.b"]
