"""What the profiler saw: a per-candidate counter table and the roofline position of the best candidates, for
`ksearch report` (terminal and HTML), `ksearch eval --profile` and `ksearch export`."""

from __future__ import annotations

from typing import Any

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from ksearch.backends.profiles import load_profiles
from ksearch.errors import KSearchError
from ksearch.harness.profile import summary_line
from ksearch.report.rundata import RunData
from ksearch.report.tables import compact_table

#: The best candidates whose roofline position is shown.
TOP = 5

COLUMNS = ["candidate", "workload", "profile", "DRAM", "L2", "SM", "tensor", "occupancy", "L2 hit", "top stall",
           "launches", "registers", "spills", "roofline"]


def _pct(v: Any) -> str:
    return f"{v:.0f}%" if isinstance(v, int | float) else "-"


def counters_note(backend: str) -> str | None:
    """Why a run on this backend has no hardware counters, or None where it can have them (mlx-cuda)."""
    if backend == "mlx-cuda":
        return None
    return f"hardware counters are not available on {backend}: the roofline fraction only"


def profiles_by_candidate(run: RunData) -> list[tuple[str, dict[str, Any]]]:
    """(candidate, its latest profile report) for every profiled candidate, the best scores first."""
    latest: dict[str, dict[str, Any]] = {}
    for p in run.records.profiles:
        latest[p.candidate_id] = p.data
    scores = {e.candidate_id: (e.score if e.status == "passed" else 0.0) for e in run.evaluations}
    return sorted(latest.items(), key=lambda kv: -scores.get(kv[0], 0.0))


def profile_row(candidate: str | None, report: dict[str, Any]) -> dict[str, str]:
    s = report.get("summary") or {}
    res = report.get("resources") or []
    stalls = s.get("stalls") or []
    occ = _pct(s.get("occupancy_pct")) + (f" ({s['occupancy_limiter']})" if s.get("occupancy_limiter") else "")
    roof = report.get("roofline_fraction")
    return {
        "candidate": candidate or "-", "workload": str(report.get("workload") or "-"),
        "profile": {"counters": "ncu", "no_counters": "no counters", "roofline_only": "roofline only"}.get(
            str(report.get("status")), str(report.get("status"))),
        "DRAM": _pct(s.get("dram_pct")), "L2": _pct(s.get("l2_pct")), "SM": _pct(s.get("sm_pct")),
        "tensor": _pct(s.get("tensor_pct")), "occupancy": occ if s else "-", "L2 hit": _pct(s.get("l2_hit_pct")),
        "top stall": f"{stalls[0]['reason']} {stalls[0]['share']:.0%}" if stalls else "-",
        "launches": str(s.get("launches_per_call", "-")) if s else "-",
        "registers": ", ".join(str(r.get("registers")) for r in res) or "-",
        "spills": ", ".join(f"{r.get('spill_store_bytes', 0)} B" for r in res) or "-",
        "roofline": f"{roof * 100:.1f}%" if isinstance(roof, int | float) else "-",
    }


def profile_table(items: list[tuple[str | None, dict[str, Any]]],
                  title: str = "profiled candidates") -> RenderableType:
    """A row per profiled candidate, then why counters are missing, as text of the console's width (a table's
    caption wraps at the table's width: a paragraph in a 45-column strip)."""
    rows = [profile_row(c, r) for c, r in items]
    cols = [c for c in COLUMNS if any(r[c] != "-" for r in rows) or c in ("candidate", "profile")]
    t = compact_table(title)
    for c in cols:
        t.add_column(c, no_wrap=True, justify="left" if c in ("candidate", "workload", "profile", "top stall")
                     else "right")
    for r in rows:
        t.add_row(*[r[c] for c in cols])
    notes = {str(r.get("note")) for _, r in items if r.get("note")}
    return Group(t, Text("; ".join(sorted(notes)), style="dim")) if notes else t


def _ridge(run: RunData) -> dict[str, float] | None:
    """flop per byte where the device's compute roof meets its bandwidth roof, per dtype (the run's hardware
    profile, as the harness's physical floor uses it)."""
    env = run.meta.get("environment") or {}
    pid = env.get("hardware_profile") if isinstance(env, dict) else None
    prof = next((p for p in load_profiles() if p.get("id") == pid), None) if pid else None
    if not prof or not prof.get("bandwidth_gbs"):
        return None
    bw = float(prof["bandwidth_gbs"]) * 1e9
    return {dt: float(tf) * 1e12 / bw for dt, tf in (prof.get("peak_tflops") or {}).items() if tf}


def roofline_rows(run: RunData, top: int = TOP) -> list[dict[str, str]]:
    """The roofline position of the best `top` candidates on each search workload: arithmetic intensity (flop per
    byte moved), the fraction of the roofline reached, and which roof bounds that workload on the run's device."""
    from ksearch.tasks import get_task

    try:
        task = get_task(run.task)
    except KSearchError:  # a task file that moved since the run: no intensities, the fractions stay
        task = None
    ridge = _ridge(run)
    best: dict[str, tuple[float, Any]] = {}
    for e in run.evaluations:
        if e.status == "passed" and e.score > best.get(e.candidate_id, (-1.0, None))[0]:
            best[e.candidate_id] = (e.score, e)
    rows = []
    for cid, (score, e) in sorted(best.items(), key=lambda kv: -kv[1][0])[:top]:
        for w in e.result.get("workloads", []):
            if w.get("split") != "search":
                continue
            intensity = bound = "-"
            if task is not None:
                try:
                    wl = task.workload(w["name"])
                    ai = task.flops(wl) / max(task.bytes_moved(wl), 1)
                    intensity = f"{ai:.2f}"
                    if ridge and wl.dtype in ridge:
                        bound = "memory" if ai < ridge[wl.dtype] else "compute"
                except (KeyError, ValueError):
                    pass
            frac = w.get("roofline_fraction")
            rows.append({"candidate": cid, "score": f"{score:.3f}", "workload": str(w["name"]),
                         "flop/byte": intensity, "bound": bound,
                         "roofline": f"{frac * 100:.1f}%" if isinstance(frac, int | float) else "-"})
    return rows


def roofline_title(rows: list[dict[str, str]]) -> str:
    """The roofline table's title, with the number of candidates it shows (a run may have fewer than TOP passed)."""
    n = len({r["candidate"] for r in rows})
    return f"roofline position of the best {n} candidates" if n > 1 else "roofline position of the best candidate"


def roofline_table(run: RunData) -> Table | None:
    rows = roofline_rows(run)
    if not rows:
        return None
    t = compact_table(roofline_title(rows))
    # A column with nothing in it (the bound and the fraction on the CPU, which has no profile's roofs) is left out.
    cols = [c for c in rows[0] if c in ("candidate", "score", "workload") or any(r[c] != "-" for r in rows)]
    for c in cols:
        t.add_column(c, no_wrap=True, justify="left" if c in ("candidate", "workload", "bound") else "right")
    for r in rows:
        t.add_row(*[r[c] for c in cols])
    return t


def export_profiles(run: RunData) -> list[dict[str, Any]]:
    """Every profiled candidate's report with its one-line summary, as `ksearch export` writes them."""
    return [{"candidate": c, "summary_line": summary_line(r), **r} for c, r in profiles_by_candidate(run)]
