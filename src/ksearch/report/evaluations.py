"""`ksearch report RUN --evaluations`: every evaluation of a run, one row each, as a table or as JSON.

Every kind is listed (the search's, then the holdout re-measurement of the best), in the order they were written;
`#` is the evaluation's index in the budget as the loop recorded it.
"""

from __future__ import annotations

import json
from typing import Any

from rich.table import Table

from ksearch.report.rundata import RunData
from ksearch.report.tables import STATUS_STYLE


def evaluation_rows(run: RunData) -> list[dict[str, Any]]:
    """One dict per evaluation: index, kind, candidate, status, score, seconds (None when not measured)."""
    return [{"index": e.eval_index, "kind": e.kind, "candidate": e.candidate_id, "status": e.status,
             "score": e.score, "seconds": e.duration_s} for e in run.all_evaluations]


def evaluations_json(run: RunData) -> str:
    return json.dumps({"run": run.run_id, "task": run.task, "backend": run.backend,
                       "evaluations": evaluation_rows(run)}, indent=1)


def evaluations_table(run: RunData) -> Table:
    # No box and no wrapping: the table is also what scripts keep of a run, one evaluation per line.
    t = Table(title=f"{run.run_id}: {len(run.all_evaluations)} evaluations", title_justify="left", box=None,
              padding=(0, 1), pad_edge=False, header_style="bold")
    for c in ("#", "kind", "candidate", "status", "score", "seconds"):
        t.add_column(c, no_wrap=True, justify="right" if c in ("#", "score", "seconds") else "left")
    for r in evaluation_rows(run):
        style = STATUS_STYLE.get(r["status"], "red")
        t.add_row(str(r["index"]), r["kind"], r["candidate"], f"[{style}]{r['status']}[/{style}]",
                  f"{r['score']:.3f}", "-" if r["seconds"] is None else f"{r['seconds']:.1f}")
    return t
