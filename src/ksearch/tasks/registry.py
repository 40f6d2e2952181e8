"""Finding tasks: built-in names, or a user's Python file that exports `TASK`."""

from __future__ import annotations

import importlib
import importlib.util
import sys
from pathlib import Path

from ksearch.errors import TaskNotFound
from ksearch.tasks.base import Task, name_problem

BUILTIN = {
    "softmax": "ksearch.tasks.softmax",
    "rmsnorm": "ksearch.tasks.rmsnorm",
    "selective_scan": "ksearch.tasks.selective_scan",
    "selective_state_update": "ksearch.tasks.selective_state_update",
    "attention": "ksearch.tasks.attention",
    "gqa_decode": "ksearch.tasks.gqa_decode",
}


def builtin_names() -> list[str]:
    names = []
    for name, module in BUILTIN.items():
        if importlib.util.find_spec(module) is not None:
            names.append(name)
    return names


def load_task_file(path: str | Path) -> Task:
    p = Path(path).resolve()
    if p.is_dir():
        raise TaskNotFound(f"task file {path} is a directory; pass a built-in name ({', '.join(builtin_names())}) or "
                           "a .py file")
    if not p.is_file():
        raise TaskNotFound(f"task file {path} does not exist; pass a built-in name ({', '.join(builtin_names())}) or a .py file")
    spec = importlib.util.spec_from_file_location(f"ksearch_user_task_{abs(hash(str(p)))}", p)
    if spec is None or spec.loader is None:
        raise TaskNotFound(f"cannot import {path}: is it a Python file?")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    try:
        spec.loader.exec_module(module)
    except Exception as exc:  # a user's file: any failure becomes one clear line
        raise TaskNotFound(f"task file {path} failed to import: {type(exc).__name__}: {exc}") from exc
    task = getattr(module, "TASK", None)
    if not isinstance(task, Task):
        raise TaskNotFound(f"task file {path} must export TASK = ksearch.tasks.Task(...)")
    if (problem := name_problem(task.name)) is not None:
        raise TaskNotFound(f"task file {path}: TASK's name {_shown(task.name)} {problem}")
    task.origin = str(p)
    return task


def _shown(name: object) -> str:
    """A name as the error line shows it: quoted, and cut short (with its length) where it is long."""
    if isinstance(name, str) and len(name) > 72:
        return f"{name[:40]!r}... ({len(name)} characters)"
    return repr(name)


def get_task(name_or_path: str) -> Task:
    """A built-in task by name, or a task file by path."""
    if name_or_path in BUILTIN and importlib.util.find_spec(BUILTIN[name_or_path]) is not None:
        module = importlib.import_module(BUILTIN[name_or_path])
        task: Task = module.TASK
        task.origin = name_or_path
        return task
    if name_or_path.endswith(".py") or "/" in name_or_path:
        return load_task_file(name_or_path)
    raise TaskNotFound(
        f"unknown task {name_or_path!r}; built-in tasks: {', '.join(builtin_names())} (or pass a task file path)"
    )


def all_tasks() -> list[Task]:
    return [get_task(n) for n in builtin_names()]
