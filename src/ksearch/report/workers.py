"""A run judged by several evaluators: per worker its device kind, verdicts, candidates lost with it and busy time;
the run's evaluations per hour; and the timeline of evaluations per worker (the HTML report's SVG). Read from each
verdict's placement (result.environment.evaluator) and the worker_lost events."""

from __future__ import annotations

from html import escape
from typing import Any

from ksearch.report.plots import STATUS_COLORS
from ksearch.report.rundata import RunData


def _placed(run: RunData) -> list[tuple[dict[str, Any], Any]]:
    out = []
    for e in run.evaluations:
        where = (e.result.get("environment") or {}).get("evaluator")
        if isinstance(where, dict):
            out.append((where, e))
    return out


def worker_rows(run: RunData) -> list[dict[str, Any]]:
    """One row per worker, in id order; empty for a single-process run."""
    rows: dict[str, dict[str, Any]] = {}
    for where, _ in _placed(run):
        r = rows.setdefault(str(where.get("worker")), {"worker": str(where.get("worker")), "evaluations": 0,
                                                       "lost": 0, "busy_s": 0.0,
                                                       "device_kind": where.get("device_kind"),
                                                       "host": where.get("host")})
        r["evaluations"] += 1
        r["busy_s"] += max(float(where.get("ended_at") or 0) - float(where.get("started_at") or 0), 0.0)
    for ev in run.events:
        if ev.kind == "worker_lost":
            wid = str(ev.data.get("worker"))
            rows.setdefault(wid, {"worker": wid, "evaluations": 0, "lost": 0, "busy_s": 0.0, "device_kind": None,
                                  "host": ev.data.get("host")})["lost"] += 1
    return [rows[k] for k in sorted(rows)]


def evaluations_per_hour(run: RunData) -> float | None:
    """Verdicts after the first over the time between the first and the last verdict."""
    ends = sorted(float(w.get("ended_at") or 0) for w, _ in _placed(run))
    if len(ends) < 2 or ends[-1] <= ends[0]:
        return None
    return (len(ends) - 1) / (ends[-1] - ends[0]) * 3600


def workers_text(run: RunData) -> str | None:
    """The headline's line (None for a single-process run)."""
    rows = worker_rows(run)
    if not rows:
        return None
    rate = evaluations_per_hour(run)
    per = ", ".join(f"{r['worker']} {r['evaluations']}" + (f" ({r['lost']} lost)" if r["lost"] else "")
                    for r in rows)
    kinds = sorted({str(r["device_kind"]) for r in rows if r["device_kind"]})
    return (f"{len(rows)}: {per}; {rate:.0f} evaluations/hour" if rate else f"{len(rows)}: {per}") + (
        f"; device kinds {', '.join(kinds)}" if len(kinds) > 1 else "")


def timeline_svg(run: RunData, width: int = 900) -> str:
    """Each evaluation as a bar on its worker's line, from its start to its verdict, coloured by status."""
    placed = _placed(run)
    if not placed:
        return ""
    t0 = min(float(w.get("started_at") or 0) for w, _ in placed)
    t1 = max(float(w.get("ended_at") or 0) for w, _ in placed)
    span = max(t1 - t0, 1e-6)
    ids = sorted({str(w.get("worker")) for w, _ in placed})
    left, lane = 60, 22
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{lane * len(ids) + 30}">']
    for i, wid in enumerate(ids):
        parts.append(f'<text x="4" y="{i * lane + 15}" font-size="12">{escape(wid)}</text>')
    for w, e in placed:
        i = ids.index(str(w.get("worker")))
        x = left + (float(w.get("started_at") or 0) - t0) / span * (width - left - 10)
        x2 = left + (float(w.get("ended_at") or 0) - t0) / span * (width - left - 10)
        color = STATUS_COLORS.get(e.status, "#888")
        parts.append(f'<rect x="{x:.1f}" y="{i * lane + 3}" width="{max(x2 - x, 1):.1f}" height="{lane - 6}" '
                     f'fill="{color}"><title>{escape(e.candidate_id)}: {escape(e.status)} '
                     f'{e.score:.3f} (evaluation {e.eval_index})</title></rect>')
    parts.append(f'<text x="{left}" y="{lane * len(ids) + 20}" font-size="11">0 s</text>')
    parts.append(f'<text x="{width - 60}" y="{lane * len(ids) + 20}" font-size="11">{span:.0f} s</text></svg>')
    return "".join(parts)
