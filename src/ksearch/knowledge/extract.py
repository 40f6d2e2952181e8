"""Finding the custom kernels inside a candidate's Python source, statically (no import, no MLX).

A candidate builds kernels with `mx.fast.cuda_kernel(...)` / `mx.fast.metal_kernel(...)` and calls the returned object
with `inputs=`, `template=`, `output_dtypes=`. The deep checks need the kernel body and enough of the call to rebuild
the wrapper MLX generates (input/output names, dtypes, template arguments), so this module evaluates the small subset
of Python that candidates use to assemble sources: string constants, names bound to them, `+`, f-strings, `.format`,
`.replace`, `.join`, int constants, and constants a `from ... import` line takes from one of ksearch's own modules
(read from that module's source, not imported). Anything else is reported as unresolved rather than guessed.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field, replace
from functools import lru_cache
from pathlib import Path
from typing import Any

#: src/ksearch: where a name imported from one of ksearch's own modules is looked up, as source text.
_PACKAGE = Path(__file__).resolve().parents[1]

FACTORIES = {"cuda_kernel": "cuda", "metal_kernel": "metal"}
_DTYPES = {"float16", "bfloat16", "float32", "int32", "uint32", "int64", "uint64", "int8", "uint8", "int16",
           "uint16", "bool_", "float64"}


class Unresolved(Exception):
    """An expression this evaluator cannot reduce to a constant."""


@dataclass
class TemplateArg:
    name: str
    kind: str  # "dtype" | "int" | "bool"
    value: Any  # dtype name, int, bool, or None when unknown


@dataclass
class KernelUse:
    """One `cuda_kernel`/`metal_kernel` construction plus what a call site tells (its first; find_kernels adds one more
    for each later launch with other template arguments or dtypes)."""

    dialect: str  # "cuda" | "metal"
    line: int
    var: str | None  # the name the kernel object is bound to
    name: str = "kernel"
    input_names: list[str] = field(default_factory=list)
    output_names: list[str] = field(default_factory=list)
    source: str | None = None  # None when it could not be resolved statically
    source_line: int | None = None  # Python line where the body's first line sits (string constants only)
    header: str = ""
    shared_memory: int | None = None
    atomic_outputs: bool = False  # metal_kernel(..., atomic_outputs=True): outputs are `device atomic<T>*`
    unresolved: str = ""  # why source could not be resolved
    # Why the header could not be resolved ("" when it was, or there is none): a header built at run time, e.g. a
    # kernel's template arguments written into it as constants (one kernel object per set), which MLX would
    # otherwise format into every call.
    header_unresolved: str = ""
    # From the call site (may stay empty when the object is never called in this file).
    input_dtypes: dict[str, str] = field(default_factory=dict)  # kernel input name -> dtype or "T" (workload)
    output_dtypes: list[str] = field(default_factory=list)
    template: list[TemplateArg] = field(default_factory=list)
    threadgroup: tuple[int, ...] | None = None


class _Env:
    """Constants visible to the evaluator: module-level first, then a function's own simple assignments."""

    def __init__(self, tree: ast.Module) -> None:
        self.globals: dict[str, ast.expr] = {}
        self.imported: dict[str, tuple[str, str]] = {}  # local name -> (ksearch module, its name there)
        for node in tree.body:
            if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
                self.globals[node.targets[0].id] = node.value
            elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.value is not None:
                self.globals[node.target.id] = node.value
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").startswith("ksearch."):
                for alias in node.names:
                    self.imported[alias.asname or alias.name] = (str(node.module), alias.name)

    def eval(self, node: ast.expr, local: dict[str, ast.expr] | None = None, depth: int = 0) -> Any:
        if depth > 40:
            raise Unresolved("expression nests too deeply")
        scope = {**self.globals, **(local or {})}
        ev = lambda n: self.eval(n, local, depth + 1)  # noqa: E731 - a local shorthand keeps the cases readable
        if isinstance(node, ast.Constant) and isinstance(node.value, (str, int, float, bool)):
            return node.value
        if isinstance(node, ast.Name):
            if node.id in scope and scope[node.id] is not node:
                return ev(scope[node.id])
            if node.id in self.imported:
                module, name = self.imported[node.id]
                there = _module_env(module)
                if there is not None and name in there.globals:
                    return there.eval(there.globals[name], None, depth + 1)
            raise Unresolved(f"name {node.id!r} is not a constant")
        if isinstance(node, ast.BinOp):
            left, right = ev(node.left), ev(node.right)
            ops = {ast.Add: lambda a, b: a + b, ast.Mult: lambda a, b: a * b, ast.Sub: lambda a, b: a - b,
                   ast.FloorDiv: lambda a, b: a // b, ast.Mod: lambda a, b: a % b}
            for typ, fn in ops.items():
                if isinstance(node.op, typ):
                    return fn(left, right)
            raise Unresolved("unsupported operator")
        if isinstance(node, ast.JoinedStr):
            parts = []
            for v in node.values:
                if isinstance(v, ast.Constant):
                    parts.append(str(v.value))
                elif isinstance(v, ast.FormattedValue):
                    spec = ev(v.format_spec) if v.format_spec is not None else ""
                    parts.append(format(ev(v.value), spec))
            return "".join(parts)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            recv = ev(node.func.value)
            if not isinstance(recv, str):
                raise Unresolved("method call on a non-string")
            method = node.func.attr
            args = [ev(a) for a in node.args]
            kwargs = {k.arg: ev(k.value) for k in node.keywords if k.arg}
            if method in ("replace", "format", "strip", "lstrip", "rstrip", "upper", "lower"):
                return getattr(recv, method)(*args, **kwargs)
            if method == "join" and len(node.args) == 1:
                seq = node.args[0]
                if isinstance(seq, (ast.List, ast.Tuple)):
                    return recv.join(str(ev(e)) for e in seq.elts)
            raise Unresolved(f"string method {method!r} is not evaluated statically")
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "dict":
            return {k.arg: ev(k.value) for k in node.keywords if k.arg}
        if isinstance(node, (ast.List, ast.Tuple)):
            return [ev(e) for e in node.elts]
        raise Unresolved(f"{type(node).__name__} is not evaluated statically")


def _is_factory(func: ast.expr) -> str | None:
    if isinstance(func, ast.Attribute) and func.attr in FACTORIES:
        return FACTORIES[func.attr]
    if isinstance(func, ast.Name) and func.id in FACTORIES:
        return FACTORIES[func.id]
    return None


def _arg(call: ast.Call, name: str, pos: int) -> ast.expr | None:
    for k in call.keywords:
        if k.arg == name:
            return k.value
    return call.args[pos] if len(call.args) > pos else None


def _dtype_of(expr: ast.expr, params: dict[str, str], local: dict[str, ast.expr]) -> str | None:
    """A dtype name for `mx.float16`, `x.dtype` (x a run() parameter), `mx.array(..., dtype=...)`, `y.astype(...)`."""
    if isinstance(expr, ast.Attribute) and expr.attr in _DTYPES:
        return "bool" if expr.attr == "bool_" else expr.attr
    if isinstance(expr, ast.Attribute) and expr.attr == "dtype" and isinstance(expr.value, ast.Name):
        # An unknown array's dtype is the workload dtype ("T"): without a task every tensor is.
        return params.get(expr.value.id) or _dtype_of(expr.value, params, local) or "T"
    if isinstance(expr, ast.Attribute) and expr.attr == "dtype":
        return "T"
    if isinstance(expr, ast.Name):
        if expr.id in params:
            return params[expr.id]
        if expr.id in local:
            return _dtype_of(local[expr.id], params, {k: v for k, v in local.items() if k != expr.id})
    if isinstance(expr, ast.Call):
        for k in expr.keywords:
            if k.arg == "dtype":
                return _dtype_of(k.value, params, local)
        if isinstance(expr.func, ast.Attribute) and expr.func.attr in ("astype", "view") and expr.args:
            return _dtype_of(expr.args[0], params, local)
        if isinstance(expr.func, ast.Attribute) and expr.func.attr == "array":
            return "float32"  # mx.array of Python floats defaults to float32
    return None


def _template(expr: ast.expr, env: _Env, params: dict[str, str], local: dict[str, ast.expr]) -> list[TemplateArg]:
    out: list[TemplateArg] = []
    if isinstance(expr, ast.Name) and isinstance(local.get(expr.id), (ast.List, ast.Tuple)):
        expr = local[expr.id]  # a list bound to a name in the same function
    if not isinstance(expr, (ast.List, ast.Tuple)):
        return out
    for item in expr.elts:
        if not (isinstance(item, ast.Tuple) and len(item.elts) == 2 and isinstance(item.elts[0], ast.Constant)):
            continue
        name, val = str(item.elts[0].value), item.elts[1]
        dtype = _dtype_of(val, params, local)
        if dtype is not None:
            out.append(TemplateArg(name, "dtype", dtype))
            continue
        is_bool = (isinstance(val, ast.Call) and isinstance(val.func, ast.Name) and val.func.id == "bool") or (
            isinstance(val, ast.Constant) and isinstance(val.value, bool)) or isinstance(val, (ast.Compare, ast.BoolOp))
        try:
            value: Any = env.eval(val, local)
        except Unresolved:
            value = None
        if is_bool or isinstance(value, bool):
            out.append(TemplateArg(name, "bool", bool(value) if value is not None else None))
        else:
            out.append(TemplateArg(name, "int", int(value) if isinstance(value, (int, float)) else None))
    return out


@lru_cache(maxsize=64)
def _module_env(module: str) -> _Env | None:
    """The module-level constants of one of ksearch's own modules, parsed from its source (never imported)."""
    base = _PACKAGE.joinpath(*module.split(".")[1:])
    for path in (base.with_suffix(".py"), base / "__init__.py"):
        if path.is_file():
            return _Env(ast.parse(path.read_text()))
    return None


def _local_bindings(func: ast.FunctionDef | ast.AsyncFunctionDef) -> dict[str, ast.expr]:
    local: dict[str, ast.expr] = {}
    for node in ast.walk(func):
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            local[node.targets[0].id] = node.value
    return local


def find_kernels(source: str, tensor_dtypes: dict[str, str] | None = None,
                 tree: ast.Module | None = None) -> list[KernelUse]:
    """Every kernel built in `source`. `tensor_dtypes` maps run() parameter names to dtypes ("T" = workload dtype);
    `tree` is `source` parsed, when the caller has it already."""
    tree = tree or ast.parse(source)
    env = _Env(tree)
    kernels: list[KernelUse] = []
    by_var: dict[str, KernelUse] = {}
    enclosing: dict[int, dict[str, ast.expr]] = {}
    for func in [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]:
        local = _local_bindings(func)
        for n in ast.walk(func):
            if isinstance(n, ast.Call) and _is_factory(n.func):
                enclosing[id(n)] = local
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and _is_factory(node.func)):
            continue
        scope = enclosing.get(id(node), {})
        use = KernelUse(dialect=_is_factory(node.func) or "", line=node.lineno, var=None)
        for field_name, pos, attr in (("name", 0, "name"), ("input_names", 1, "input_names"),
                                      ("output_names", 2, "output_names"), ("header", 4, "header")):
            expr = _arg(node, field_name, pos)
            if expr is None:
                continue
            try:
                value = env.eval(expr, scope)
            except Unresolved as exc:
                if field_name == "header":
                    use.header_unresolved = str(exc) or "built at run time"
                continue
            setattr(use, attr, [str(v) for v in value] if isinstance(value, list) else str(value))
        src = _arg(node, "source", 3)
        if src is None:
            use.unresolved = "no source= argument"
        else:
            try:
                use.source = str(env.eval(src, scope))
            except Unresolved as exc:
                use.unresolved = str(exc)
            target = {**env.globals, **scope}.get(src.id) if isinstance(src, ast.Name) else src
            if isinstance(target, ast.Constant) and isinstance(target.value, str):
                use.source_line = target.lineno
        atomic = _arg(node, "atomic_outputs", 6) if use.dialect == "metal" else None
        if atomic is not None:
            try:
                use.atomic_outputs = bool(env.eval(atomic, scope))
            except Unresolved:
                use.atomic_outputs = False
        consts = _arg(node, "constants", 99)
        if consts is not None:  # the library's kernel_text wrappers: template arguments written into the header
            use.template = _template(consts, env, {"dtype": "T"}, scope)
        smem = _arg(node, "shared_memory", 99)
        if smem is not None:
            try:
                use.shared_memory = int(env.eval(smem, scope))
            except (Unresolved, TypeError, ValueError):
                use.shared_memory = None
        kernels.append(use)
    # Bind kernels to the names they are assigned to, then read the first call of each name.
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call) and _is_factory(node.value.func):
            for k in kernels:
                if k.line == node.value.lineno and isinstance(node.targets[0], ast.Name):
                    k.var = node.targets[0].id
                    by_var[k.var] = k
    params_dtypes = tensor_dtypes or {}
    read: set[int] = set()  # kernels whose launch was read (the first launch of each)
    unbound_launches: list[tuple[ast.Call, dict[str, str], dict[str, ast.expr]]] = []
    # A kernel launched with other template arguments or dtypes elsewhere (one branch a dtype or head dim) is
    # checked at each of them: one more KernelUse a configuration, after the kernels themselves.
    configurations: list[KernelUse] = []
    for func in [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]:
        local = _local_bindings(func)
        # Without a task every array argument is taken to have the workload dtype ("T").
        params = {a.arg: params_dtypes.get(a.arg, "T") for a in func.args.args
                  if a.arg in params_dtypes or not params_dtypes}
        for call in sorted((n for n in ast.walk(func) if isinstance(n, ast.Call)), key=lambda n: n.lineno):
            if isinstance(call.func, ast.Name) and call.func.id in by_var:
                use = by_var[call.func.id]
                if id(use) not in read:
                    _read_call(use, call, env, params, local)
                    read.add(id(use))
                else:
                    other = _another_launch(use, call, env, params, local)
                    if other is not None and all(_launch_key(other) != _launch_key(k) for k in
                                                 [use, *configurations] if k.line == use.line):
                        configurations.append(other)
            elif _arg(call, "inputs", 99) is not None and _arg(call, "output_shapes", 99) is not None:
                unbound_launches.append((call, params, local))
    # Kernels built lazily (`_get_kernel()(inputs=...)`, a dict of kernels, ...): pair the remaining kernels with the
    # remaining launch calls in source order; a heuristic, but the alternative is no template arguments at all.
    pending = [k for k in kernels if id(k) not in read]
    unbound_launches.sort(key=lambda t: t[0].lineno)
    if len(pending) == len(unbound_launches) or len(pending) == 1:
        for use, (call, params, local) in zip(pending, unbound_launches, strict=False):
            _read_call(use, call, env, params, local)
    return kernels + configurations


def _another_launch(use: KernelUse, call: ast.Call, env: _Env, params: dict[str, str],
                    local: dict[str, ast.expr]) -> KernelUse | None:
    """The kernel as a later launch configures it, or None where that launch reads no template arguments (it then
    tells nothing the first did not)."""
    if _arg(call, "template", 99) is None:
        return None
    other = replace(use, input_dtypes=dict(use.input_dtypes), output_dtypes=list(use.output_dtypes), template=[])
    _read_call(other, call, env, params, local)
    return other


def _launch_key(k: KernelUse) -> tuple[Any, ...]:
    return (tuple((t.name, t.kind, t.value) for t in k.template), tuple(sorted(k.input_dtypes.items())),
            tuple(k.output_dtypes), k.threadgroup)


def _read_call(use: KernelUse, call: ast.Call, env: _Env, params: dict[str, str], local: dict[str, ast.expr]) -> None:
    """Input/output dtypes, template arguments and threadgroup from one launch of the kernel."""
    inputs = _arg(call, "inputs", 99)
    if isinstance(inputs, (ast.List, ast.Tuple)):
        for name, expr in zip(use.input_names, inputs.elts, strict=False):
            use.input_dtypes[name] = _dtype_of(expr, params, local) or "float32"
    outs = _arg(call, "output_dtypes", 99)
    if isinstance(outs, (ast.List, ast.Tuple)):
        use.output_dtypes = [_dtype_of(e, params, local) or "T" for e in outs.elts]
    tmpl = _arg(call, "template", 99)
    if tmpl is not None:
        use.template = _template(tmpl, env, params, local)
    tg = _arg(call, "threadgroup", 99)
    if tg is not None:
        try:
            val = env.eval(tg, local)
            use.threadgroup = tuple(int(v) for v in val)
        except (Unresolved, TypeError, ValueError):
            pass
