"""The candidate's entry point: where its module binds `run`, and whether the harness's call fits that binding.

The harness imports a candidate and calls `run(**inputs, **params)` (harness/worker.py): keywords only, one per input
tensor of the task and one per scalar parameter of the workload (`causal`, `length`, ...). The harness's static checks
(harness/static.py) refuse a source whose module body binds no `run`; the linter (`lint_source`) also reads what the
last such binding is:

- `def run(...)`, `run = lambda ...`, `run = f` or `run = mx.compile(f)` for a module-level function `f`, a def whose
  decorators are `mx.compile` (or `partial(mx.compile, ...)`): a function whose parameters are checked against the
  call, when the task is known;
- a literal (number, string, list, dict, ...) or `async def run`: not something the harness can call for arrays;
- anything else (an import, another call's result, a def under another decorator): accepted unchecked, as only
  importing the module could tell what it is.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ksearch.tasks.base import Task

ENTRY = "run"
_LITERALS: dict[type[ast.expr], str] = {
    ast.Constant: "a constant", ast.JoinedStr: "a string", ast.List: "a list", ast.ListComp: "a list",
    ast.Tuple: "a tuple", ast.Dict: "a dict", ast.DictComp: "a dict", ast.Set: "a set", ast.SetComp: "a set",
    ast.GeneratorExp: "a generator",
}


@dataclass(frozen=True)
class EntryProblem:
    code: str  # "no-run" | "run-not-callable" | "run-signature"
    message: str
    line: int | None = None


@dataclass(frozen=True)
class _Function:
    label: str  # how messages name it: "run()", "run_slice() (bound to run)"
    args: ast.arguments
    line: int


def _bound_names(node: ast.stmt) -> set[str]:
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return {node.name}
    if isinstance(node, ast.Assign):
        return {t.id for t in node.targets if isinstance(t, ast.Name)}
    if isinstance(node, ast.AnnAssign) and node.value is not None and isinstance(node.target, ast.Name):
        return {node.target.id}
    if isinstance(node, (ast.Import, ast.ImportFrom)):
        return {(a.asname or a.name).split(".")[0] for a in node.names}
    return set()


def run_bindings(tree: ast.Module, name: str = ENTRY) -> list[ast.stmt]:
    """The statements of the module body that bind `name` (a def, an assignment, an import), in order. Bindings
    nested in `if`/`try` blocks do not count: the harness requires an unconditional top-level `run`."""
    return [n for n in tree.body if name in _bound_names(n)]


def _dotted(expr: ast.expr) -> str:
    if isinstance(expr, ast.Name):
        return expr.id
    if isinstance(expr, ast.Attribute):
        return f"{_dotted(expr.value)}.{expr.attr}"
    return ""


def _is_compile(expr: ast.expr) -> bool:
    """mx.compile (or a partial of it): the compiled function takes the same arguments as the one it wraps."""
    if isinstance(expr, ast.Call) and _dotted(expr.func).rsplit(".", 1)[-1] == "partial" and expr.args:
        expr = expr.args[0]
    return _dotted(expr).rsplit(".", 1)[-1] == "compile"


def _resolve(tree: ast.Module, node: ast.stmt | ast.expr, seen: frozenset[str]) -> _Function | EntryProblem | None:
    """What `run` is bound to: a function to check, a problem already, or None when it cannot be known statically."""
    if isinstance(node, ast.FunctionDef):
        if not all(_is_compile(d) for d in node.decorator_list):
            return None
        label = "run()" if node.name == ENTRY else f"{node.name}() (bound to run)"
        return _Function(label, node.args, node.lineno)
    if isinstance(node, ast.AsyncFunctionDef):
        return EntryProblem("run-not-callable", f"`async def {node.name}` returns a coroutine, not arrays: the harness "
                            "calls run() synchronously; make it a plain def", node.lineno)
    if isinstance(node, (ast.Assign, ast.AnnAssign)):
        return _resolve(tree, node.value, seen) if node.value is not None else None
    if isinstance(node, ast.Lambda):
        return _Function("run (a lambda)", node.args, node.lineno)
    if isinstance(node, ast.Call) and _is_compile(node.func) and node.args:
        return _resolve(tree, node.args[0], seen)
    if isinstance(node, ast.Name) and node.id not in seen:
        bindings = run_bindings(tree, node.id)
        return _resolve(tree, bindings[-1], seen | {node.id}) if bindings else None
    kind = next((k for t, k in _LITERALS.items() if isinstance(node, t)), None)
    if kind is not None:
        return EntryProblem("run-not-callable", f"run is bound to {kind} ({ast.unparse(node)[:40]}), not a function: "
                            "the harness calls run(**inputs, **params); define `def run(...)`", node.lineno)
    return None


def _calls(task: Task) -> list[tuple[str, list[str]]]:
    """(workload, the keywords the harness passes run for it): the task's inputs, then the workload's parameters."""
    inputs = [s.name for s in task.inputs]
    return [(w.name, inputs + [p for p in w.params if p not in inputs]) for w in task.workloads]


def _call_text(calls: list[tuple[str, list[str]]]) -> str:
    names = list(dict.fromkeys(n for _, kws in calls for n in kws))
    return "run(" + ", ".join(f"{n}=..." for n in names) + ")"


def _required(args: ast.arguments) -> list[str]:
    positional = args.posonlyargs + args.args
    names = [a.arg for a in positional[:len(positional) - len(args.defaults)]]
    return names + [a.arg for a, d in zip(args.kwonlyargs, args.kw_defaults, strict=True) if d is None]


def _unexpected(fn: _Function, calls: list[tuple[str, list[str]]]) -> list[EntryProblem]:
    if fn.args.kwarg is not None:
        return []
    takes = {a.arg for a in fn.args.args + fn.args.kwonlyargs}
    extra = list(dict.fromkeys(n for _, kws in calls for n in kws if n not in takes))
    if not extra:
        return []
    positional_only = {a.arg for a in fn.args.posonlyargs} & set(extra)
    hint = f" ({', '.join(sorted(positional_only))} positional-only: drop the `/`)" if positional_only else ""
    return [EntryProblem("run-signature", f"{fn.label} takes no keyword {', '.join(extra)}{hint}: the harness calls "
                         f"{_call_text(calls)} (the task's inputs, then the workload's scalar parameters); name the "
                         "parameters after them or add **kwargs", fn.line)]


def _never_passed(fn: _Function, calls: list[tuple[str, list[str]]]) -> list[EntryProblem]:
    out = []
    for name in _required(fn.args):
        missing = [w for w, kws in calls if name not in kws]
        if not missing:
            continue
        where = "never passes" if len(missing) == len(calls) else f"does not pass in workload {', '.join(missing)}"
        out.append(EntryProblem("run-signature", f"{fn.label} requires {name}, which the harness {where} (it calls "
                                f"{_call_text(calls)}): give {name} a default or drop it", fn.line))
    return out


def _suggested(task: Task | None) -> str:
    if task is None or task.generator is not None:
        return "def run(...)` taking the task's inputs and scalar parameters by name"
    calls = _calls(task) or [("", [s.name for s in task.inputs])]
    names = list(dict.fromkeys(n for _, kws in calls for n in kws))
    everywhere = set.intersection(*(set(kws) for _, kws in calls))
    return "def run(" + ", ".join(n if n in everywhere else f"{n}=None" for n in names) + ")`"


def check_entry(tree: ast.Module, task: Task | None = None) -> list[EntryProblem]:
    """Problems with the module's `run`: missing, not a function, or (with a task) parameters the harness's call does
    not fit. A task with a custom input generator names its inputs only at run time: its parameters go unchecked."""
    bindings = run_bindings(tree)
    if not bindings:
        return [EntryProblem("no-run", "no top-level run defined: the harness imports the module and calls "
                             f"run(**inputs, **params); define `{_suggested(task)} at module level")]
    target = _resolve(tree, bindings[-1], frozenset({ENTRY}))
    if isinstance(target, EntryProblem):
        return [target]
    if target is None or task is None or task.generator is not None:
        return []
    calls = _calls(task)
    return _unexpected(target, calls) + _never_passed(target, calls)
