"""Judging a candidate's outputs against the trusted reference, in the parent, with NumPy the candidate never saw."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ksearch.tasks.base import Task, Workload


@dataclass
class Verdict:
    status: str  # passed | wrong_shape | wrong_answer
    message: str = ""
    max_abs: float = 0.0
    max_rel: float = 0.0


def judge(task: Task, workload: Workload, outputs: list[np.ndarray], dtypes: list[str],
          reference: list[np.ndarray]) -> Verdict:
    specs = task.outputs
    if len(outputs) != len(specs):
        return Verdict("wrong_shape", f"run() returned {len(outputs)} outputs; the task has {len(specs)} "
                       f"({', '.join(s.name for s in specs)})")
    atol, rtol = task.tolerance(workload.dtype)
    worst_abs = worst_rel = 0.0
    for spec, out, dt, ref in zip(specs, outputs, dtypes, reference, strict=True):
        want_shape = spec.resolved_shape(workload)
        if tuple(out.shape) != tuple(want_shape):
            return Verdict("wrong_shape", f"output {spec.name}: shape {tuple(out.shape)}, expected {want_shape}")
        want_dtype = spec.resolved_dtype(workload)
        if dt != want_dtype:
            return Verdict("wrong_shape", f"output {spec.name}: dtype {dt}, expected {want_dtype}")
        # float32 is exact enough for tolerances >= 1e-4 (eps 1.2e-7) and halves the time and memory of judging the
        # GPU workloads' outputs (tens of MB, several trials per workload), which dominated an evaluation there.
        o = out.astype(np.float32, copy=False)
        r = ref.astype(np.float32, copy=False)
        if not o.size:
            continue
        # Few full passes: the GPU workloads' outputs are tens of MB and are judged several times per workload.
        abs_r = np.abs(r)
        diff = np.abs(o - r)
        allowed = atol + rtol * abs_r
        ok = diff <= allowed  # False for NaN, so a NaN never passes
        if not ok.all():
            finite = np.isfinite(o)
            if not finite.all():
                bad = int((~finite).sum())
                return Verdict("wrong_answer", f"output {spec.name}: {bad} of {o.size} values are NaN or Inf")
            idx = np.unravel_index(int(np.argmax(diff - allowed)), diff.shape)
            max_abs = float(diff.max())
            return Verdict(
                "wrong_answer",
                f"output {spec.name}: {int((~ok).sum())} of {o.size} values outside atol={atol} rtol={rtol}; "
                f"worst at {tuple(int(i) for i in idx)}: got {o[idx]:.6g}, expected {r[idx]:.6g} "
                f"(max abs err {max_abs:.3g})",
                max_abs, float((diff / np.maximum(abs_r, atol)).max()),
            )
        max_abs = float(diff.max())
        # Relative error against |ref|, floored at atol so near-zero references do not blow it up.
        max_rel = float((diff / np.maximum(abs_r, atol)).max())
        worst_abs, worst_rel = max(worst_abs, max_abs), max(worst_rel, max_rel)
    return Verdict("passed", "", worst_abs, worst_rel)
