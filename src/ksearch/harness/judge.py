"""Judging a candidate's outputs against the trusted reference, in the parent, with NumPy the candidate never saw."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ksearch.harness.host_threads import over_slabs
from ksearch.tasks.base import Task, Workload


@dataclass
class Verdict:
    status: str  # passed | wrong_shape | wrong_answer
    message: str = ""
    #: None where some output value is NaN or Inf: no error can be given (0 would read as exact).
    max_abs: float | None = 0.0
    max_rel: float | None = 0.0


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
        if not out.size:
            continue
        within, max_abs, max_rel = _within(out, ref, atol, rtol)
        if within:
            worst_abs, worst_rel = max(worst_abs, max_abs), max(worst_rel, max_rel)
            continue
        # Not within: the whole arrays again, as the authority and for the message (where, how many, NaN or not).
        o = out.astype(np.float32, copy=False)
        r = ref.astype(np.float32, copy=False)
        abs_r = np.abs(r)
        diff = np.abs(o - r)
        allowed = atol + rtol * abs_r
        ok = diff <= allowed  # False for NaN, so a NaN never passes
        if not ok.all():  # always so after _within: the same float32 arithmetic on the same values
            finite = np.isfinite(o)
            if not finite.all():
                bad = int((~finite).sum())
                first = tuple(int(i) for i in np.unravel_index(int(np.argmin(finite)), finite.shape))
                return Verdict("wrong_answer", f"output {spec.name}: {bad} of {o.size} values are NaN or Inf, the "
                               f"first at {first}", None, None)
            idx = np.unravel_index(int(np.argmax(diff - allowed)), diff.shape)
            max_abs = float(diff.max())
            return Verdict(
                "wrong_answer",
                f"output {spec.name}: {int((~ok).sum())} of {o.size} values outside atol={atol} rtol={rtol}; "
                f"worst at {tuple(int(i) for i in idx)}: got {o[idx]:.6g}, expected {r[idx]:.6g} "
                f"(max abs err {max_abs:.3g})",
                max_abs, float((diff / np.maximum(abs_r, atol)).max()),
            )
        max_abs, max_rel = float(diff.max()), float((diff / np.maximum(abs_r, atol)).max())
        worst_abs, worst_rel = max(worst_abs, max_abs), max(worst_rel, max_rel)
    return Verdict("passed", "", worst_abs, worst_rel)


#: Elements judged at a time: a chunk's float32 temporaries (256 KB) stay in the CPU's cache. The GPU workloads'
#: outputs are tens of MB, judged several times per workload and evaluation; side by side on the 2-core CPU, 4096 x 4096
#: values take 0.066 s in chunks on 2 threads against 0.325 s whole (`python benchmarks/judge_speed.py`).
CHUNK = 1 << 16


def _within(out: np.ndarray, ref: np.ndarray, atol: float, rtol: float) -> tuple[bool, float, float]:
    """Whether every value is within atol + rtol * |ref| (a NaN never is), and the largest absolute and relative
    errors (relative to |ref| floored at atol, so near-zero references do not blow it up). In float32: exact enough
    for tolerances >= 1e-4 (eps 1.2e-7). Slabs of the arrays on threads of their own (host_threads)."""
    o, r = out.reshape(-1), ref.reshape(-1)
    parts = over_slabs(o.size, lambda lo, hi: _within_slab(o[lo:hi], r[lo:hi], atol, rtol), align=CHUNK)
    if not all(ok for ok, _, _ in parts):
        return False, 0.0, 0.0
    return True, max(a for _, a, _ in parts), max(m for _, _, m in parts)


def _within_slab(o: np.ndarray, r: np.ndarray, atol: float, rtol: float) -> tuple[bool, float, float]:
    max_abs = max_rel = 0.0
    for i in range(0, o.size, CHUNK):
        diff = o[i:i + CHUNK].astype(np.float32)  # a copy: the arithmetic below reuses it in place
        rc = r[i:i + CHUNK].astype(np.float32, copy=False)
        np.subtract(diff, rc, out=diff)
        np.abs(diff, out=diff)
        scale = np.abs(rc)
        allowed = scale * rtol
        allowed += atol
        if not (diff <= allowed).all():
            return False, 0.0, 0.0
        max_abs = max(max_abs, float(diff.max()))
        np.maximum(scale, atol, out=scale)
        np.divide(diff, scale, out=diff)
        max_rel = max(max_rel, float(diff.max()))
    return True, max_abs, max_rel
