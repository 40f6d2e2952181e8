"""`ksearch export RUN`: the best candidate as a plain module, or as a FlashInfer-Trace dataset.

FlashInfer-Bench (Definition / Workload / Solution / Trace JSON) has no language value for MLX. The mapping chosen here:

- `spec.language` is "python" for every MLX backend. The entry point is a Python function; on mlx-metal and mlx-cuda
  it JIT-compiles its kernels itself through `mx.fast.metal_kernel` / `mx.fast.cuda_kernel`, which is the case
  FlashInfer-Bench files under "python" (a Python wrapper that handles its own compilation). The MLX dialect is kept
  in `spec.dependencies` (`mlx >= <version>`, `mlx-backend: metal|cuda|cpu`) and in the description.
- `spec.destination_passing_style` is false: ksearch candidates return their outputs.
- `target_hardware` is the evaluated device's name in FlashInfer's spelling (`NVIDIA_H200`, `APPLE_M3_MAX`).
- A ksearch task has one dtype per workload, a Definition one per tensor: one Definition per (task, dtype), named
  `<task>_<dtype>`, every axis `var`. Scalar workload parameters become scalar inputs (shape null).
- `reference` is the task's MLX reference function (not PyTorch) with the helpers and constants it uses, and a
  `run(...)` wrapper taking the inputs by name.
- A Trace's `reference_latency_ms` is the ksearch baseline's latency (e.g. `mx.softmax` for the "native" baseline),
  so `speedup_factor` equals ksearch's per-workload speedup.
- Statuses: passed -> PASSED, wrong_answer -> INCORRECT_NUMERICAL, wrong_shape -> INCORRECT_SHAPE, compile_error ->
  COMPILE_ERROR, timeout -> TIMEOUT, runtime_error and forbidden -> RUNTIME_ERROR.
"""

from __future__ import annotations

import ast
import builtins
import datetime as _dt
import inspect
import json
import re
import shlex
import textwrap
import uuid
from pathlib import Path
from typing import Any

from ksearch import __version__
from ksearch.backends import code_backend
from ksearch.errors import ExportError
from ksearch.harness.result import EvalResult, WorkloadResult
from ksearch.report.rundata import RunData

FIB_STATUS = {
    "passed": "PASSED", "wrong_answer": "INCORRECT_NUMERICAL", "wrong_shape": "INCORRECT_SHAPE",
    "compile_error": "COMPILE_ERROR", "timeout": "TIMEOUT", "runtime_error": "RUNTIME_ERROR",
    "forbidden": "RUNTIME_ERROR",
}
SCALAR_DTYPE = {bool: "bool", int: "int32", float: "float32"}


def _now() -> str:
    return _dt.datetime.now(_dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _best(run: RunData) -> tuple[str, str, EvalResult]:
    """The run's result (its confirmation's pick, else the search's best): its id, source and search evaluation."""
    cid = run.chosen_candidate
    if cid is None:
        raise ExportError(f"run {run.run_id} has no passing candidate to export")
    source = run.source(cid)
    if source is None and (run.path / "best.py").is_file():
        source = (run.path / "best.py").read_text()
    result = run.search_result(cid)
    if source is None or result is None:
        raise ExportError(f"run {run.run_id}: the source or the evaluation of {cid} is missing")
    return cid, source, result


def unfinished_warning(run: RunData) -> str | None:
    """For a run that has not finished (interrupted, stopped, failed, still running): its exported kernel is the best
    so far, which no end has timed again or judged on the holdout. None for a finished run."""
    if run.status == "finished":
        return None
    return (f"run {run.run_id} did not finish ({run.status}): {run.chosen_candidate} is its best so far, not judged "
            "on the holdout")


def module_text(run: RunData, out_name: str = "kernel.py") -> str:
    """The best candidate's source, unchanged, under a provenance header (comments, so any import order holds)."""
    cid, source, result = _best(run)
    hold = run.holdout_result()
    cand = run.candidate(cid)
    env = result.environment or {}
    n_search = sum(1 for w in result.workloads if w.split == "search")
    hold_txt = "not evaluated"
    if hold is not None:
        hs = hold.holdout_score if hold.holdout_score is not None else hold.score
        hold_txt = f"{hs:.3f} ({hold.status})"
    lines = [
        "# Exported by ksearch: the kernel a K-Search run chose (its best timed again, else the search's best).",
        f"#   run:       {run.run_id}",
        f"#   task:      {run.task}    backend: {run.backend}",
        f"#   candidate: {cid}" + (f"  (action: {cand.action_title})" if cand and cand.action_title else ""),
        f"#   score:     {result.score:.4f} = geomean speedup over {n_search} search workloads "
        f"vs baseline {result.baseline!r}",
        f"#   holdout:   {hold_txt}",
        *_confirmation_lines(run, cid),
        f"#   measured:  mlx {env.get('mlx', '?')} on {env.get('device', '?')}",
        *([f"#   timing:    {result.timing}"] if result.timing else []),
        *_profile_lines(run, cid, out_name),
        f"#   exported:  {_now()} by ksearch {__version__}",
        f"#   re-check:  {shlex.join(['ksearch', 'eval', run.task, out_name, '--backend', run.backend])}",
        "",
    ]
    return "\n".join(lines) + source


def _confirmation_lines(run: RunData, cid: str) -> list[str]:
    """Where the candidate is the run's confirmed pick: its median and what it was picked from."""
    c = run.confirmation()
    if c is None or c.get("pick") != cid:
        return []
    return [f"#   timed again: median {float(c.get('pick_median') or 0):.4f} over {c.get('times')} new evaluations, "
            f"the highest of the run's {len(c['candidates'])} best"]


def _profile_lines(run: RunData, cid: str, out_name: str) -> list[str]:
    """The best candidate's profile in the header, and where every profile of the run is written."""
    from ksearch.report.profiles import export_profiles

    profiles = export_profiles(run)
    mine = next((p for p in profiles if p["candidate"] == cid), None)
    lines = [f"#   profile:   {mine['summary_line']}"[:400]] if mine else []
    if profiles:
        lines.append(f"#   profiles:  {profiles_path(Path(out_name)).name} ({len(profiles)} profiled candidates)")
    return lines


def profiles_path(out: Path) -> Path:
    """Where an exported module's run profiles go: beside it, kernel.py -> kernel.profiles.json."""
    return out.with_name(out.stem + ".profiles.json")


def write_module(run: RunData, out: Path) -> Path:
    """The module, and beside it every profiled candidate's counters (profiles_path) when the run has any."""
    from ksearch.report.profiles import export_profiles

    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(module_text(run, out.name))
    profiles = export_profiles(run)
    if profiles:
        profiles_path(out).write_text(json.dumps(profiles, indent=1, default=str) + "\n")
    return out


# -- FlashInfer-Trace ----------------------------------------------------------------------------------------------
def hardware_name(env: dict[str, Any], backend: str) -> str:
    name = str(env.get("device") or backend)
    return re.sub(r"[^A-Za-z0-9]+", "_", name).strip("_").upper() or backend.upper()


def workload_uuid(task: str, workload: str) -> str:
    """Stable across exports, so that workload entries and traces of two runs of one task line up."""
    return str(uuid.uuid5(uuid.NAMESPACE_URL, f"ksearch:{task}:{workload}"))


def _free_names(source: str) -> set[str]:
    """Names a piece of code reads but neither defines, assigns, imports nor gets as an argument."""
    tree = ast.parse(source)
    bound = set(dir(builtins))
    for n in ast.walk(tree):
        if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            bound.add(n.name)
        elif isinstance(n, ast.Import | ast.ImportFrom):
            bound.update((a.asname or a.name).split(".")[0] for a in n.names)
        elif isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store):
            bound.add(n.id)
        elif isinstance(n, ast.arg):
            bound.add(n.arg)
    return {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)} - bound


def _helpers(fn: Any, body: str) -> list[str]:
    """The module-level helpers, constants and imports the reference uses, so that the text runs on its own."""
    glb = getattr(fn, "__globals__", {})
    out: list[str] = []
    done: set[str] = set()
    todo = sorted(_free_names(body))
    while todo:
        name = todo.pop(0)
        if name in done or name not in glb:
            continue
        done.add(name)
        value = glb[name]
        if inspect.ismodule(value):
            out.insert(0, f"import {value.__name__}" + (f" as {name}" if value.__name__ != name else ""))
        elif inspect.isfunction(value):
            try:
                src = textwrap.dedent(inspect.getsource(value))
            except (OSError, TypeError):
                continue
            out.append(src)
            todo.extend(sorted(_free_names(src) - done))
        elif isinstance(value, int | float | str | bool | tuple) and not callable(value):
            out.insert(0, f"{name} = {value!r}")
    return out


def _reference_source(task: Any) -> str:
    names = [t.name for t in task.inputs]
    params = sorted({k for w in task.workloads for k in w.params})
    args = ", ".join(names + params)
    try:
        body = textwrap.dedent(inspect.getsource(task.reference))
        helpers = _helpers(task.reference, body)
    except (OSError, TypeError, SyntaxError):
        body = f"# reference source unavailable; the task says:\n# {task.description}\n"
        helpers = []
    pkw = "".join(f", {p}={p}" for p in params)
    call = f"reference({{{', '.join(f'{n!r}: {n}' for n in names)}}}{pkw})"
    prelude = "".join(("\n\n\n" if h.lstrip().startswith("def ") else "\n") + h.rstrip() for h in helpers)
    # The wrapper returns a single output bare, as FlashInfer's value-returning style expects.
    return (f"# MLX reference of ksearch task {task.name!r} (not PyTorch).\nfrom typing import Any\n\n"
            f"import mlx.core as mx\n{prelude}\n\n{body}\n\ndef run({args}):\n    out = {call}\n"
            f"    return out[0] if len(out) == 1 else out\n")


def definitions(task: Any) -> dict[str, dict[str, Any]]:
    """One Definition per workload dtype, keyed by its name."""
    out: dict[str, dict[str, Any]] = {}
    ref = _reference_source(task)
    for dtype in dict.fromkeys(w.dtype for w in task.workloads):
        axes = list(dict.fromkeys(a for t in [*task.inputs, *task.outputs] for a in t.shape))
        inputs: dict[str, Any] = {t.name: {"shape": list(t.shape), "dtype": dtype if t.dtype == "workload" else t.dtype}
                                  for t in task.inputs}
        for w in task.workloads:
            for k, v in w.params.items():
                inputs.setdefault(k, {"shape": None, "dtype": SCALAR_DTYPE.get(type(v), "float32")})
        name = f"{task.name}_{dtype}"
        out[name] = {
            "name": name,
            "op_type": task.kind,
            "tags": ["source:ksearch", f"dtype:{dtype}"],
            "description": task.description,
            "axes": {a: {"type": "var"} for a in axes},
            "inputs": inputs,
            "outputs": {t.name: {"shape": list(t.shape), "dtype": dtype if t.dtype == "workload" else t.dtype}
                        for t in task.outputs},
            "reference": ref,
        }
    return out


def _workload_obj(task: Any, w: Any) -> dict[str, Any]:
    inputs: dict[str, Any] = {t.name: {"type": "random"} for t in task.inputs}
    inputs.update({k: {"type": "scalar", "value": v} for k, v in w.params.items()})
    return {"uuid": workload_uuid(task.name, w.name), "axes": dict(w.axes), "inputs": inputs}


def _evaluation(wr: WorkloadResult, result: EvalResult, when: str) -> dict[str, Any]:
    status = FIB_STATUS.get(wr.status, "RUNTIME_ERROR")
    correct = None
    if status in ("PASSED", "INCORRECT_NUMERICAL") and wr.max_abs_err is not None:
        correct = {"max_relative_error": wr.max_rel_err or 0.0, "max_absolute_error": wr.max_abs_err}
    perf = None
    # An emulated device's times are the emulator's: no performance is claimed for it.
    if status == "PASSED" and wr.latency_s and wr.baseline_latency_s and not result.timing:
        perf = {"latency_ms": wr.latency_s * 1e3, "reference_latency_ms": wr.baseline_latency_s * 1e3,
                "speedup_factor": wr.speedup if wr.speedup is not None else wr.baseline_latency_s / wr.latency_s}
    env = result.environment or {}
    libs = {k: str(env[k]) for k in ("mlx", "ksearch", "python") if env.get(k)}
    return {"status": status, "log": wr.message or result.message or "", "correctness": correct,
            "performance": perf, "environment": {"hardware": hardware_name(env, result.backend), "libs": libs},
            "timestamp": when}


def flashinfer_trace(run: RunData) -> dict[str, Any]:
    """{"definitions": {...}, "solutions": [...], "workloads": {def: [...]}, "traces": {def: [...]}} in memory."""
    from ksearch.tasks import TaskNotFound, get_task

    cid, source, result = _best(run)
    try:
        task = get_task(run.task)
    except (TaskNotFound, OSError, ValueError) as exc:
        raise ExportError(f"cannot load task {run.task!r} of run {run.run_id}: {exc}") from exc
    defs = definitions(task)
    env = result.environment or {}
    family = code_backend(run.backend).removeprefix("mlx-")
    module = module_text(run, "main.py")
    sol_names = {d: f"{d}_ksearch_{run.run_id}_{cid}" for d in defs}
    solutions = [{
        "name": sol_names[d],
        "definition": d,
        "description": f"MLX ({run.backend}) kernel found by ksearch K-Search, run {run.run_id}, candidate {cid}, "
                       f"score {result.score:.4f} vs baseline {result.baseline!r}.",
        "author": "ksearch",
        "spec": {"language": "python", "target_hardware": [hardware_name(env, run.backend)],
                 "entry_point": "main.py::run", "destination_passing_style": False,
                 "dependencies": [f"mlx >= {env.get('mlx') or '0.32'}", f"mlx-backend: {family}"]},
        "sources": [{"path": "main.py", "content": module}],
    } for d in defs]
    def_of = {w.name: f"{task.name}_{w.dtype}" for w in task.workloads}
    workloads: dict[str, list[dict[str, Any]]] = {d: [] for d in defs}
    for w in task.workloads:
        workloads[def_of[w.name]].append({"definition": def_of[w.name], "workload": _workload_obj(task, w),
                                          "solution": None, "evaluation": None})
    traces: dict[str, list[dict[str, Any]]] = {d: [] for d in defs}
    evaluated = [(result, _eval_time(run, cid, "search"))]
    hold = run.holdout_result()
    if hold is not None:
        evaluated.append((hold, _eval_time(run, cid, "holdout")))
    seen: set[str] = set()
    for res, when in evaluated:
        for wr in res.workloads:
            if wr.name in seen or wr.name not in def_of:
                continue
            seen.add(wr.name)
            d = def_of[wr.name]
            traces[d].append({"definition": d, "workload": _workload_obj(task, task.workload(wr.name)),
                              "solution": sol_names[d], "evaluation": _evaluation(wr, res, when)})
    return {"definitions": defs, "solutions": solutions, "workloads": workloads, "traces": traces,
            "op_type": task.kind}


def _eval_time(run: RunData, cid: str, kind: str) -> str:
    rows = run.evaluations if kind == "search" else run.holdout_evaluations
    ts = next((e.created_at for e in reversed(rows) if e.candidate_id == cid), None)
    if ts is None:
        return _now()
    return _dt.datetime.fromtimestamp(float(ts), _dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def write_flashinfer_trace(run: RunData, out_dir: Path) -> list[Path]:
    """The dataset layout FlashInfer-Bench's TraceSet loads (it globs each folder recursively)."""
    data = flashinfer_trace(run)
    op = data["op_type"]
    written: list[Path] = []

    def put(path: Path, text: str) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        written.append(path)

    for name, d in data["definitions"].items():
        put(out_dir / "definitions" / op / f"{name}.json", json.dumps(d, indent=2) + "\n")
    for s in data["solutions"]:
        put(out_dir / "solutions" / "ksearch" / op / s["definition"] / f"{s['name']}.json",
            json.dumps(s, indent=2) + "\n")
    for name, rows in data["workloads"].items():
        if rows:
            put(out_dir / "workloads" / op / f"{name}.jsonl", "".join(json.dumps(r) + "\n" for r in rows))
    for name, rows in data["traces"].items():
        if rows:
            put(out_dir / "traces" / "ksearch" / op / f"{name}.jsonl", "".join(json.dumps(r) + "\n" for r in rows))
    from ksearch.report.profiles import export_profiles

    profiles = export_profiles(run)
    if profiles:  # outside the four folders FlashInfer-Bench reads: ksearch's own record of the counters
        put(out_dir / "ksearch-profiles.json", json.dumps(profiles, indent=1, default=str) + "\n")
    return written
