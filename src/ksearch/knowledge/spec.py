"""The spec: the Markdown document a proposer receives (task math and contract, the dialect's API, the relevant
knowledge rows, hardware numbers, pitfalls, and an optional CUDA port context).

`render_spec` works for every backend name even where that backend is absent: the spec is documentation, so a
missing device falls back to a representative profile (H200 for mlx-cuda, M3 Max for mlx-metal).
"""

from __future__ import annotations

import inspect
import textwrap
from typing import TYPE_CHECKING, Any

from ksearch.backends import code_backend
from ksearch.knowledge import assertions_for, by_id, hardware_profile, load_concepts, patterns_for
from ksearch.knowledge.lint import BACKENDS
from ksearch.knowledge.spec_text import API, CORE_CONCEPTS, PITFALLS, REPRESENTATIVE

if TYPE_CHECKING:
    from ksearch.tasks.base import Task

DIALECT_KEY = {"mlx-cuda": "cuda", "mlx-metal": "metal", "mlx-cpu": "mlx"}
FORM_KEY = {"mlx-cuda": "mlx_cuda", "mlx-metal": "metal"}
LANG = {"cuda": "cuda", "metal": "metal", "mlx": "python"}


def _signature(task: Task) -> str:
    params = sorted({k for w in task.workloads for k in w.params})
    args = ", ".join([t.name for t in task.inputs] + params)
    outs = ", ".join(t.name for t in task.outputs)
    return f"run({args}) -> {outs if len(task.outputs) == 1 else '(' + outs + ')'}"


def _task_section(task: Task, backend: str, tier: str | None = None) -> list[str]:
    tier = tier or ("cpu" if backend == "mlx-cpu" else "gpu")
    lines = [f"## Task: {task.name} ({task.kind})", "", task.description, "",
             f"Contract: a Python module defining `{_signature(task)}`; outputs in the order listed, in the "
             "workload's dtype unless stated.", "", "| tensor | role | shape | dtype |", "|---|---|---|---|"]
    lines += [f"| {t.name} | input | ({', '.join(t.shape)}) | {t.dtype} |" for t in task.inputs]
    lines += [f"| {t.name} | output | ({', '.join(t.shape)}) | {t.dtype} |" for t in task.outputs]
    work = [w for w in task.workloads if w.tier == tier] or task.workloads
    lines += ["", f"Workloads ({tier} tier; holdout ones are judged but not searched):", "",
              "| name | axes | dtype | params | split |", "|---|---|---|---|---|"]
    for w in work:
        axes = ", ".join(f"{k}={v}" for k, v in w.axes.items())
        params = ", ".join(f"{k}={v}" for k, v in w.params.items()) or "-"
        lines.append(f"| {w.name} | {axes} | {w.dtype} | {params} | {w.split} |")
    tols = sorted({w.dtype for w in work})
    lines += ["", "Tolerances (atol, rtol): " + ", ".join(f"{d} {task.tolerance(d)}" for d in tols)]
    if task.forbidden:
        lines.append("Forbidden APIs (the candidate must compute the result itself): "
                     + ", ".join(f"`{f}`" for f in task.forbidden))
    try:
        ref = textwrap.dedent(inspect.getsource(task.reference))
        lines += ["", "Reference (computed in float32 in a trusted worker):", "", "```python", ref.rstrip(), "```"]
    except (OSError, TypeError):
        pass
    return lines


def _profile(backend: str) -> tuple[dict[str, Any], str]:
    """The detected profile when this backend is here and matched, else the representative one."""
    if backend == "mlx-cpu":
        try:
            from ksearch.backends import Backend

            return Backend("mlx-cpu", "cpu").profile(), "detected"
        except Exception:  # the CPU profile is informational; never fail the spec over it
            return {"id": "cpu", "name": "CPU"}, "generic"
    try:
        from ksearch.backends import available_backends

        for b in available_backends():
            if b.name == backend:
                prof = b.profile()
                if prof.get("matched"):
                    return prof, "detected"
    except Exception:  # detection needs MLX; documentation must not
        pass
    return hardware_profile(REPRESENTATIVE[backend]), "representative (backend not present here)"


def _hardware_section(backend: str) -> list[str]:
    prof, how = _profile(backend)
    lines = [f"## Hardware: {prof.get('name', prof.get('id'))} ({how})", ""]
    if backend == "mlx-cpu":
        llc = prof.get("llc_bytes")
        return lines + [f"- last-level cache: {llc // (1 << 20)} MiB" if llc else "- last-level cache: unknown",
                        "- no custom kernels: performance comes from fewer passes, fusion and cache-sized blocks"]
    smem = prof.get("shared_memory_kb", {})
    peaks = prof.get("peak_tflops", {})
    rows = [
        ("compute units (SMs / GPU cores)", prof.get("compute_units")),
        ("SIMD / warp width", prof.get("simd_width")),
        ("max threads per threadgroup", prof.get("max_threads_per_group")),
        ("shared / threadgroup memory per group (KB)", f"{smem.get('default')} default, {smem.get('max_opt_in')} max"),
        ("L2 / SLC (MB)", prof.get("l2_mb")),
        ("memory (GB)", prof.get("memory_gb")),
        ("bandwidth (GB/s)", prof.get("bandwidth_gbs")),
        ("peak TFLOPS fp16 / bf16 / fp32", f"{peaks.get('float16')} / {peaks.get('bfloat16')} / {peaks.get('float32')}"),
        ("arch / family", prof.get("arch") or prof.get("family")),
    ]
    lines += [f"- {k}: {v}" for k, v in rows if v is not None]
    lines += [f"- quirk: {q}" for q in prof.get("quirks", [])]
    return lines


def _concepts_section(backend: str, pattern_rows: list[dict[str, Any]]) -> list[str]:
    wanted = list(CORE_CONCEPTS)
    for p in pattern_rows:
        wanted += [c for c in p.get("concepts", []) if c not in wanted]
    rows = by_id(load_concepts())
    form = FORM_KEY[backend]
    lines = ["## CUDA concepts in this dialect", "",
             f"| CUDA | {'MSL (metal_kernel body)' if backend == 'mlx-metal' else 'MLX-CUDA (cuda_kernel body)'} "
             "| hard constraints |", "|---|---|---|"]
    for cid in wanted:
        c = rows.get(cid)
        if c is None:
            continue
        cons = "; ".join(c.get("constraints", [])) or "-"
        cell = str(c[form]).replace("|", "\\|")
        lines.append(f"| `{c['cuda']}` | {cell} | {cons.replace('|', '/')} |".replace("\n", " "))
    return lines


def _patterns_section(backend: str, pattern_rows: list[dict[str, Any]], boosted: set[str]) -> list[str]:
    key = DIALECT_KEY[backend]
    lines = ["## Optimisation patterns (highest prior first)", ""]
    for p in pattern_rows:
        mark = " [named by the CUDA port context]" if p["id"] in boosted else ""
        prior = p["prior"]
        lines += [f"### {p['id']}: {p['title']}{mark}", "", p["description"], "",
                  f"- preconditions: {'; '.join(p['preconditions'])}",
                  f"- expected impact: {p['expected_impact']}",
                  f"- prior: rating {prior['rating_0_to_10']}/10, difficulty {prior['difficulty_1_to_5']}/5, "
                  f"expected x{prior['expected_vs_baseline_factor']} vs baseline"]
        ex = p["exemplars"].get(key)
        if ex:
            lines += ["", f"```{LANG[key]}", ex.rstrip(), "```"]
        lines.append("")
    return lines


def _port_section(port: dict[str, Any]) -> list[str]:
    lines = ["## Porting context (from a CUDA kernel)", "", f"Source: {port.get('file', '?')}", ""]
    for f in port.get("findings", []):
        lines.append(f"- line {f.get('line')}: {f.get('title', f.get('concept'))} -> {f.get('target', '')}")
    for w in port.get("warnings", []):
        lines.append(f"- WARNING line {w.get('line')}: {w.get('message')}")
    if port.get("patterns"):
        lines.append("- patterns that carry it over: " + ", ".join(port["patterns"]))
    return lines


def render_spec(task: Task, backend: str, port_context: dict[str, Any] | None = None) -> str:
    """The full spec for `task` on `backend` (mlx-cuda, mlx-metal or mlx-cpu)."""
    if backend not in BACKENDS:
        raise ValueError(f"unknown backend {backend!r}; choose one of {', '.join(BACKENDS)}")
    asked, backend = backend, code_backend(backend)
    boosted = set((port_context or {}).get("patterns", []))
    pattern_rows = patterns_for(task.kind, backend)
    pattern_rows.sort(key=lambda p: (p["id"] not in boosted, -p["prior"]["rating_0_to_10"]))
    parts: list[str] = [f"# Kernel spec: {task.name} on {asked}", ""]
    if asked != backend:
        # An emulation: the code is the emulated backend's, the workloads are the CPU tier's, times are not Apple's.
        parts += [f"Candidates are {backend} code, judged on {asked}: an emulation of the device on this machine's "
                  "CPU at the cpu-tier shapes. A correctness verdict counts; a time is the emulator's, not the "
                  "device's, so write for the real hardware described below.", ""]
    parts += _task_section(task, backend, "cpu" if asked != backend else None) + [""]
    parts += [f"## Dialect: {backend}", "", API[backend].rstrip(), ""]
    parts += _hardware_section(backend) + [""]
    if backend != "mlx-cpu":
        parts += _concepts_section(backend, pattern_rows) + [""]
    parts += _patterns_section(backend, pattern_rows, boosted)
    parts += ["## Properties a correct kernel keeps", ""]
    parts += [f"- **{a['id']}** ({a['severity']}): {a['statement']} Review: {a['review']}"
              for a in assertions_for(task.kind)]
    parts += ["", "## Known pitfalls", ""] + [f"- {p}" for p in PITFALLS[backend]]
    if port_context:
        parts += [""] + _port_section(port_context)
    return "\n".join(parts).rstrip() + "\n"
