"""A Python file loaded as a module, for tests of a benchmark script's functions (benchmarks/ is not a package) or of
a rendered source written to a file."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[1]


def load_module(path: Path, name: str | None = None) -> ModuleType:
    """The module at `path`, executed once, under `name` (the file's stem by default)."""
    spec = importlib.util.spec_from_file_location(name or path.stem, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def load_script(relative: str) -> ModuleType:
    """A file of the repository by its path from the root, e.g. `benchmarks/decode_power.py`."""
    return load_module(ROOT / relative)


def import_benchmark(name: str) -> ModuleType:
    """benchmarks/NAME.py imported as the module NAME with benchmarks/ on the path while it loads, as running it there
    puts it: for a script that imports a sibling script."""
    import sys

    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        return importlib.import_module(name)
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))
