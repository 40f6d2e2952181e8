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
        o = out.astype(np.float64)
        r = ref.astype(np.float64)
        finite = np.isfinite(o)
        if not finite.all():
            bad = int((~finite).sum())
            return Verdict("wrong_answer", f"output {spec.name}: {bad} of {o.size} values are NaN or Inf")
        diff = np.abs(o - r)
        max_abs = float(diff.max()) if diff.size else 0.0
        mask = np.abs(r) > atol
        max_rel = float((diff[mask] / np.abs(r[mask])).max()) if mask.any() else 0.0
        worst_abs, worst_rel = max(worst_abs, max_abs), max(worst_rel, max_rel)
        bad_mask = diff > atol + rtol * np.abs(r)
        if bad_mask.any():
            idx = np.unravel_index(int(np.argmax(diff - (atol + rtol * np.abs(r)))), diff.shape)
            return Verdict(
                "wrong_answer",
                f"output {spec.name}: {int(bad_mask.sum())} of {o.size} values outside atol={atol} rtol={rtol}; "
                f"worst at {tuple(int(i) for i in idx)}: got {o[idx]:.6g}, expected {r[idx]:.6g} "
                f"(max abs err {max_abs:.3g})",
                max_abs, max_rel,
            )
    return Verdict("passed", "", worst_abs, worst_rel)
