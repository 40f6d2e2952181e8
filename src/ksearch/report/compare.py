"""`ksearch compare RUN RUN ...`: best-so-far curves on one chart, final scores, evaluations to reach 90% of the best.

"90% of the best" is 90% of each run's own final best: it measures how early a strategy finds most of what it will
find. Next to the final scores (which say how much it finds) that is what tells two strategies apart at one budget.
"""

from __future__ import annotations

import datetime as _dt
from dataclasses import dataclass
from html import escape
from pathlib import Path

from rich.console import Console, RenderableType
from rich.markup import escape as markup_escape

from ksearch import __version__
from ksearch.report.plots import compare_svg, save_compare
from ksearch.report.rundata import RunData
from ksearch.report.tables import fitted_table, scored

REACH = 0.9


@dataclass
class RunLine:
    label: str
    run_id: str
    task: str
    backend: str
    strategy: str
    policy: str
    budget: int | None
    evaluations: int
    best: float
    best_candidate: str | None  # the candidate that scored `best` in the search
    holdout: float | None
    holdout_candidate: str | None  # the run's pick, which the holdout judged (not always the search's best)
    to_reach: int | None  # evaluations until best-so-far >= REACH * best; None when nothing passed
    curve: list[float]
    status: str = "finished"  # as shown (RunData.stage): a run still searched, or cut short, has no final figures


def with_status(lines: list[RunLine]) -> bool:
    """Whether the comparison shows each run's status: where one of them has not finished."""
    return any(ln.status != "finished" for ln in lines)


def evaluations_to_reach(curve: list[float], fraction: float = REACH) -> int | None:
    best = max(curve, default=0.0)
    if best <= 0:
        return None
    return next(i for i, v in enumerate(curve, 1) if v >= fraction * best)


def labels_for(runs: list[RunData]) -> list[str]:
    """Strategy names when they tell the runs apart (the usual ksearch vs evolve vs greedy), else run ids."""
    strategies = [str(r.meta.get("strategy") or r.run_id) for r in runs]
    if len(set(strategies)) == len(strategies):
        return strategies
    ids = [r.run_id for r in runs]
    return ids if len(set(ids)) == len(ids) else [str(r.path) for r in runs]


def lines_for(runs: list[RunData]) -> list[RunLine]:
    out = []
    for label, r in zip(labels_for(runs), runs, strict=True):
        curve = [a.best_so_far for a in r.attempts]
        best = max(curve, default=0.0)
        # The candidate of the curve's top, so that the number and the name always go together.
        top = next((a.candidate_id for a in r.attempts if a.status == "passed" and a.score == best > 0), None)
        hold = r.holdout_result()
        hs = None
        if hold is not None:
            hs = hold.holdout_score if hold.holdout_score is not None else hold.score
        out.append(RunLine(label, r.run_id, r.task, r.backend, str(r.meta.get("strategy") or "-"),
                           str(r.meta.get("policy") or "-"), r.budget, len(r.attempts), best, top, hs,
                           (r.holdout_candidate or r.chosen_candidate) if hold is not None else None,
                           evaluations_to_reach(curve), curve, r.stage))
    return out


def warnings_for(lines: list[RunLine]) -> list[str]:
    """Comparisons that are not like for like are still drawn, but said so."""
    out = []
    if len({(ln.task, ln.backend) for ln in lines}) > 1:
        out.append("the runs differ in task or backend: their scores are not comparable")
    if len({ln.budget for ln in lines}) > 1:
        out.append("the runs have different budgets")
    return out


def compare_table(lines: list[RunLine], console: Console) -> RenderableType:
    """A table where the terminal fits it whole, else each run's label on a line of its own with its figures below:
    a run id is what users copy, so it is never broken."""
    top = max((ln.best for ln in lines), default=0.0)
    status = with_status(lines)
    rows = []
    for ln in lines:
        best = markup_escape(scored(ln.best_candidate, ln.best))
        rows.append((markup_escape(ln.label), markup_escape(f"{ln.strategy} / {ln.policy}"),
                     f"{ln.evaluations}/{ln.budget}" if ln.budget else str(ln.evaluations),
                     f"[b green]{best}[/b green]" if ln.best == top and top > 0 else best,
                     markup_escape(scored(ln.holdout_candidate, ln.holdout)),
                     "-" if ln.to_reach is None else str(ln.to_reach), *([markup_escape(ln.status)] if status else [])))
    return fitted_table(console, _title(lines), ("run", "strategy", "evals", "search best", "pick's holdout",
                                                 f"evals to {REACH:.0%}") + (("status",) if status else ()), rows)


def _title(lines: list[RunLine]) -> str:
    tasks = sorted({f"{ln.task} on {ln.backend}" for ln in lines})
    return "best score so far, " + ", ".join(tasks)


def compare_html(lines: list[RunLine]) -> str:
    status = with_status(lines)
    rows = "".join(
        f"<tr><td>{escape(ln.label)}</td><td>{escape(ln.run_id)}</td><td>{escape(ln.strategy)} / "
        f"{escape(ln.policy)}</td><td>{escape(ln.task)} / {escape(ln.backend)}</td>"
        f"<td class=num>{ln.evaluations}{'/' + str(ln.budget) if ln.budget else ''}</td>"
        f"<td class=num>{escape(scored(ln.best_candidate, ln.best))}</td>"
        f"<td class=num>{escape(scored(ln.holdout_candidate, ln.holdout))}</td>"
        f"<td class=num>{'-' if ln.to_reach is None else ln.to_reach}</td>"
        f"{f'<td>{escape(ln.status)}</td>' if status else ''}</tr>" for ln in lines)
    warn = "".join(f'<p class="warn">{escape(w)}</p>' for w in warnings_for(lines))
    when = _dt.datetime.now(_dt.UTC).strftime("%Y-%m-%d %H:%M UTC")
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>ksearch compare</title>
<style>
body {{ font: 14px/1.45 system-ui, sans-serif; margin: 0; background: #fafbfc; color: #1f2328; }}
main {{ max-width: 1000px; margin: 0 auto; padding: 24px; }}
.chart svg {{ max-width: 100%; height: auto; background: #fff; border: 1px solid #d0d7de; border-radius: 6px; }}
table {{ border-collapse: collapse; background: #fff; font-size: 13px; margin-top: 16px; }}
th, td {{ border: 1px solid #d0d7de; padding: 4px 9px; text-align: left; }} td.num {{ text-align: right; }}
th {{ background: #f0f3f6; }} .warn {{ color: #b26a00; }} footer {{ margin-top: 30px; font-size: 12px; color: #656d76; }}
</style></head><body><main>
<h1>ksearch compare</h1>{warn}
<div class="chart" id="compare-chart">{compare_svg([(ln.label, ln.curve) for ln in lines], _title(lines))}</div>
<table><thead><tr><th>label</th><th>run</th><th>strategy / policy</th><th>task / backend</th><th>evaluations</th>
<th>search best</th><th>pick's holdout</th><th>evals to {REACH:.0%} of best</th>
{"<th>status</th>" if status else ""}</tr></thead>
<tbody>{rows}</tbody></table>
<footer>Generated by ksearch {escape(__version__)} on {when}.</footer>
</main></body></html>
"""


def write_compare(lines: list[RunLine], out: Path) -> Path:
    """PNG or SVG (the chart alone) or HTML (chart and table), chosen by the file's suffix."""
    out.parent.mkdir(parents=True, exist_ok=True)
    suffix = out.suffix.lower()
    if suffix in (".png", ".svg"):
        save_compare([(ln.label, ln.curve) for ln in lines], _title(lines), out)
    elif suffix in (".html", ".htm"):
        out.write_text(compare_html(lines), encoding="utf-8")
    else:
        raise ValueError(f"--out {out}: use a .png, .svg or .html file")
    return out
