"""Every file, folder, module and function the documentation names exists in the tree.

The documents (README.md, docs/*.md, benchmarks/*.md, benchmarks/results/logs/README.md, benchmarks/gpu_suite.sh)
and the docstrings and comments of src/ksearch and benchmarks/*.py are read as text; what looks like ours is checked:

- repository paths: `src/ksearch/...`, `benchmarks/...`, `tests/...`, `docs/...` (globs `*` and `<placeholder>`
  parts match any name); in the benchmark documents also `results/...` and `logs/...` under benchmarks/results,
  and result files named alone (`decode-mlx-cuda-nvidia-h200.json`) in benchmarks/results/ or its logs/;
- paths inside the package named from its root: `harness/evaluator.py`, `kernels/attention/`, ...;
- `path.py: name` pairs: the function, class or method (`Class.method`) is defined in that file;
- dotted modules `ksearch.a.b`, and `ksearch.a.b.name` where name is bound at the top of module ksearch.a.b.

benchmarks/findings.md describes code that was removed: a path of its that is not in the tree must be in one of the
commits its table row names (checked where git and those commits are at hand).
"""

from __future__ import annotations

import ast
import io
import re
import shutil
import subprocess
import tokenize
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PKG = ROOT / "src" / "ksearch"
FINDINGS = "benchmarks/findings.md"
BENCH_DOCS = ("benchmarks/README.md", FINDINGS)  # where `results/...` is relative to benchmarks/


def _documents() -> list[str]:
    docs = ["README.md", *(f"docs/{p.name}" for p in sorted((ROOT / "docs").glob("*.md")))]
    docs += [f"benchmarks/{p.name}" for p in sorted((ROOT / "benchmarks").glob("*.md"))]
    return docs + ["benchmarks/results/logs/README.md", "benchmarks/gpu_suite.sh"]


def _sources() -> list[str]:
    """The Python files whose docstrings and comments are read: the package and the benchmark scripts."""
    files = [*sorted(PKG.rglob("*.py")), *sorted((ROOT / "benchmarks").rglob("*.py"))]
    return [str(p.relative_to(ROOT)) for p in files]


ROOMS = sorted(p.name for p in PKG.iterdir() if p.is_dir() and not p.name.startswith("_"))
_SEG = r"[\w.*<>{}-]"  # one character of a path segment; * and <...> are placeholders
REPO_PATH = re.compile(rf"(?<![\w./<>$-])((?:src/ksearch|benchmarks|tests|docs)/{_SEG}*(?:/{_SEG}*)*)")
BENCH_PATH = re.compile(rf"(?<![\w./<>$-])((?:results|logs)/{_SEG}+(?:/{_SEG}*)*)")
ROOM_PATH = re.compile(rf"(?<![\w./<>$-])((?:{'|'.join(ROOMS)})/(?:{_SEG}+/)*(?:{_SEG}+\.(?:py|yaml|json|h|j2))?)"
                       rf"(?![\w/])")
FILE_NAME = re.compile(r"`((?:[\w./]+/)?\w+\.py):\s*([A-Za-z_][\w.]*)[^`]*`")
MODULE = re.compile(r"(?<![\w./-])(ksearch(?:\.[A-Za-z_]\w*)+)")
RESULT_NAME = re.compile(r"`([\w.*<>-]+\.(?:json|log|txt))`")  # a result file named alone, in RESULT_DOCS
RESULT_DOCS = ("benchmarks/README.md", "benchmarks/results/logs/README.md")
COMMIT = re.compile(r"(?<![\w/-])([0-9a-f]{7,40})(?![\w-])")


def _clean(token: str) -> str:
    token = token.rstrip(".,:;)'\"`")
    return token[:-1] if token.endswith(("-", "_")) and "*" not in token else token


def _pattern(path: str) -> re.Pattern[str]:
    """A repository path with placeholders as a regular expression over slash-separated paths."""
    out = ""
    for part in re.split(r"(\*|<[^>/]*>|\{[^}/]*\})", path):
        out += "[^/]*" if part and part[0] in "*<{" else re.escape(part)
    return re.compile(out + "/?")


@cache
def _tree() -> tuple[str, ...]:
    """Every file and folder under the repository's documented roots, relative and slash-separated."""
    out: list[str] = []
    for top in ("src", "benchmarks", "tests", "docs"):
        for p in (ROOT / top).rglob("*"):
            if "__pycache__" not in p.parts:
                out.append(str(p.relative_to(ROOT)) + ("/" if p.is_dir() else ""))
    return tuple(out)


def _exists(path: str) -> bool:
    if (ROOT / path).exists():
        return True
    # Placeholders: *, <name>, {a,b}, and words in capitals (CONFIG, RUN) standing for a name.
    pat = _pattern(re.sub(r"(?<![A-Za-z])[A-Z][A-Z_]+(?![a-z])", "*", path))
    return any(pat.fullmatch(p) for p in _tree())


@cache
def _commit_files(commit: str) -> tuple[str, ...] | None:
    if not shutil.which("git"):
        return None
    r = subprocess.run(["git", "-C", str(ROOT), "ls-tree", "-r", "--name-only", commit],
                       capture_output=True, text=True)
    return tuple(r.stdout.split()) if r.returncode == 0 else None


@cache
def _module_file(module: str) -> Path | None:
    rel = Path(*module.split(".")[1:])
    for p in (PKG / rel / "__init__.py", (PKG / rel).with_suffix(".py")):
        if p.is_file():
            return p
    return PKG / "__init__.py" if module == "ksearch" else None


@cache
def _definitions(path: Path) -> dict[str, set[str]]:
    """Top-level names bound in a module, and for each top-level class the names bound in its body."""
    tree = ast.parse(path.read_text(), filename=str(path))
    out: dict[str, set[str]] = {"": set()}

    def bound(node: ast.stmt) -> set[str]:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            return {node.name}
        if isinstance(node, ast.Assign | ast.AnnAssign | ast.AugAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            return {n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)}
        if isinstance(node, ast.Import | ast.ImportFrom):
            return {(a.asname or a.name).split(".")[0] for a in node.names}
        if isinstance(node, ast.If | ast.Try):
            return {n for child in ast.iter_child_nodes(node) if isinstance(child, ast.stmt) for n in bound(child)}
        return set()

    for node in tree.body:
        out[""] |= bound(node)
        if isinstance(node, ast.ClassDef):
            out[node.name] = {n for child in node.body for n in bound(child)}
    return out


def _defined(path: Path, dotted: str) -> bool:
    defs = _definitions(path)
    head, _, rest = dotted.partition(".")
    if head not in defs[""]:
        return False
    return not rest or head not in defs or rest.split(".")[0] in defs[head]


def _check_module(dotted: str) -> str | None:
    parts = dotted.split(".")
    for n in range(len(parts), 0, -1):
        path = _module_file(".".join(parts[:n]))
        if path is None:
            continue
        if n == len(parts):
            return None
        name = parts[n]
        if _defined(path, name) or _module_file(".".join(parts[: n + 1])) is not None:
            return None
        return f"module {dotted}: {'.'.join(parts[:n])} defines no {name}"
    return f"module {dotted}: no such module"


def _bench_path(token: str) -> str:
    """`logs/X` (anywhere) and `results/X` (in the documents of benchmarks/), relative to the repository root."""
    return ("benchmarks/results/" if token.startswith("logs/") else "benchmarks/") + token


def _prose_lines(rel: str) -> list[tuple[int, str]]:
    """A document's lines; of a Python source, only its docstrings and comments (code is checked by importing it)."""
    text = (ROOT / rel).read_text()
    if not rel.endswith(".py"):
        return list(enumerate(text.splitlines(), 1))
    out: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(text, filename=rel)):
        body = getattr(node, "body", None)
        if isinstance(body, list) and body and isinstance(body[0], ast.Expr) \
                and isinstance(body[0].value, ast.Constant) and isinstance(body[0].value.value, str):
            doc = body[0].value
            out += [(doc.lineno + i, line) for i, line in enumerate(str(doc.value).splitlines())]
    tokens = tokenize.generate_tokens(io.StringIO(text).readline)
    out += [(t.start[0], t.string) for t in tokens if t.type == tokenize.COMMENT]
    return sorted(out)


def problems(rel: str) -> list[str]:
    out: list[str] = []
    for lineno, line in _prose_lines(rel):
        where = f"{rel}:{lineno}"
        missing: list[str] = []
        for m in REPO_PATH.finditer(line):
            path = _clean(m.group(1))
            if path.count("/") >= 1 and not _exists(path):
                missing.append(path)
        for m in BENCH_PATH.finditer(line):
            token = _clean(m.group(1))
            if (token.startswith("logs/") or rel in BENCH_DOCS) and not _exists(_bench_path(token)):
                missing.append(_bench_path(token))
        if rel in RESULT_DOCS:
            for m in RESULT_NAME.finditer(line):
                name = m.group(1)
                if not any(_exists(f"benchmarks/results/{d}{name}") for d in ("", "logs/")):
                    missing.append(f"benchmarks/results/[logs/]{name}")
        for m in ROOM_PATH.finditer(line):
            path = "src/ksearch/" + _clean(m.group(1))
            if not _exists(path):
                missing.append(path)
        if rel == FINDINGS:
            commits = [c for c in COMMIT.findall(line) if _commit_files(c) is not None]
            kept: list[str] = []
            for path in missing:
                if not commits:
                    if shutil.which("git") and COMMIT.search(line) is None:
                        kept.append(path)  # no commit named: the path must be in the tree
                    continue
                pat = _pattern(path)
                if not any(pat.fullmatch(f) for c in commits for f in _commit_files(c) or ()):
                    kept.append(path)
            missing = kept
        out += [f"{where}: no such path: {p}" for p in missing]
        for m in FILE_NAME.finditer(line):
            file, name = m.group(1), m.group(2).rstrip(".")
            path = ROOT / file if file.startswith(("src/", "benchmarks/", "tests/")) else PKG / file
            if path.is_file() and path.suffix == ".py" and not _defined(path, name):
                out.append(f"{where}: {file} defines no {name}")
        for m in MODULE.finditer(line):
            err = _check_module(m.group(1).rstrip("."))
            if err:
                out.append(f"{where}: {err}")
    return out


@pytest.mark.parametrize("rel", _documents())
def test_document_names_only_what_exists(rel: str) -> None:
    assert (ROOT / rel).is_file(), f"{rel} is listed as a document but is missing"
    found = problems(rel)
    assert not found, "\n".join(found)


def test_source_comments_name_only_what_exists() -> None:
    found = [p for rel in _sources() for p in problems(rel)]
    assert not found, "\n".join(found)


def test_the_checker_catches_what_it_should() -> None:
    # A checker that passes everything would let the documents rot unnoticed.
    assert _check_module("ksearch.harness.evaluator") is None
    assert _check_module("ksearch.harness.evaluator.Evaluator") is None
    assert _check_module("ksearch.harness.nonexistent") is not None
    assert _check_module("ksearch.harness.evaluator.no_such_name") is not None
    assert _exists("benchmarks/results/decode-*-nvidia-h200.json")
    assert _exists("src/ksearch/tasks/starters/")
    assert not _exists("src/ksearch/report/benchjson.py")
    assert _defined(PKG / "harness" / "evaluator.py", "Evaluator.evaluate")
    assert not _defined(PKG / "harness" / "evaluator.py", "Evaluator.no_such_method")
    assert ROOM_PATH.search("see `harness/evaluator.py`") is not None
    assert ROOM_PATH.search("api.openai.com/v1") is None
