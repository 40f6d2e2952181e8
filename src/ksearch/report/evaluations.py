"""`ksearch report RUN --evaluations`: every evaluation of a run, one row each, as a table or as JSON.

Every kind is listed (the search's, the confirmation's timing of its best again, the holdout evaluation of the run's
pick), in the order they were written. A row is its kind and its number among that kind: a search evaluation's is its
place in the budget as the loop recorded it; the confirmation's and the holdout's, which spend no budget, count 1, 2,
... in the order they ran. A holdout row's score is the holdout score, the figure `ksearch report` shows.
"""

from __future__ import annotations

import json
from typing import Any

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from ksearch.report.rundata import RunData
from ksearch.report.tables import STATUS_STYLE
from ksearch.store import EvaluationRow


def _score(e: EvaluationRow) -> float:
    """What the evaluation is judged by: a holdout evaluation by its holdout workloads (its search workloads, timed
    again beside them, are `report`'s "re-measured"), any other by its own workloads."""
    return e.holdout_score if e.kind == "holdout" and e.holdout_score is not None else e.score


def evaluation_rows(run: RunData) -> list[dict[str, Any]]:
    """One dict per evaluation: n (its number among its kind), kind, candidate, status, score, seconds (None when
    not measured), and index (the budget spent when it was recorded)."""
    counted: dict[str, int] = {}
    rows = []
    for e in run.all_evaluations:
        counted[e.kind] = counted.get(e.kind, 0) + 1
        rows.append({"n": e.eval_index if e.kind == "search" else counted[e.kind], "kind": e.kind,
                     "candidate": e.candidate_id, "status": e.status, "score": _score(e), "seconds": e.duration_s,
                     "index": e.eval_index})
    return rows


def evaluations_json(run: RunData) -> str:
    return json.dumps({"run": run.run_id, "task": run.task, "backend": run.backend,
                       "evaluations": evaluation_rows(run)}, indent=1)


def evaluations_table(run: RunData) -> RenderableType:
    # No box and no wrapping: the table is also what scripts keep of a run, one evaluation per line.
    t = Table(box=None, padding=(0, 1), pad_edge=False, header_style="bold")
    for c in ("#", "kind", "candidate", "status", "score", "seconds"):
        t.add_column(c, no_wrap=True, justify="right" if c in ("#", "score", "seconds") else "left")
    for r in evaluation_rows(run):
        style = STATUS_STYLE.get(r["status"], "red")
        t.add_row(str(r["n"]), r["kind"], r["candidate"], f"[{style}]{r['status']}[/{style}]",
                  f"{r['score']:.3f}", "-" if r["seconds"] is None else f"{r['seconds']:.1f}")
    # The title on a line of its own: a table's title wraps at the table's width, and the run id is copied whole.
    title = Text(f"{run.run_id}: {len(run.all_evaluations)} evaluations", style="bold")
    note = Text("#: a search evaluation's place in the budget; confirm and holdout evaluations count 1, 2, ... "
                "in the order they ran. A holdout row's score is the holdout score.", style="dim")
    return Group(title, t, note)
