"""`ksearch watch RUN`: follow a run that another process is writing, until it is finished, stopped or failed.

It only reads (the database is opened read-only), so any number of watchers can follow one run without slowing it.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from rich.console import Console, Group, RenderableType
from rich.live import Live
from rich.progress_bar import ProgressBar
from rich.table import Table
from rich.text import Text

from ksearch.report.plots import STATUS_COLORS
from ksearch.report.rundata import RunData, load_run
from ksearch.report.summary import holdout_text, spend_text, status_text
from ksearch.search.confirm import own_counts, top_candidates
from ksearch.search.run_end import TIMING_AGAIN
from ksearch.store import RunUnreadable

LAST = 8
#: The loop's final states; any other ("running", "holdout" while the run's end times its best again, then judges its
#: result on the holdout workloads) is still going.
DONE = {"finished", "stopped", "failed", "interrupted"}
#: A run at its end (RunData.stage), under its status in the frame's head.
END_NOTES = {TIMING_AGAIN: "the search has ended; its best are timed again to choose its result",
             "holdout": "judging the run's result on unseen workloads"}
#: After this long without a new evaluation a "running" run is flagged: its process may have died without a word.
STALE_S = 600.0


def frame(run: RunData, now: float | None = None) -> RenderableType:
    now = time.time() if now is None else now
    head = Text()
    head.append(f"{run.run_id}", style="bold")
    head.append(f"  {run.task} on {run.backend}  ")
    stage = run.stage
    style = {"running": "cyan", TIMING_AGAIN: "cyan", "holdout": "cyan", "finished": "green", "stopped": "yellow",
             "failed": "red", "interrupted": "red"}.get(stage, "dim")
    head.append(stage, style=f"bold {style}")  # why it ended: the final state row
    if stage in END_NOTES:
        head.append(f"  ({END_NOTES[stage]})", style="dim")

    done, budget = run.evaluations_done, run.budget
    bar = Table.grid(padding=(0, 1))
    bar.add_column(width=8)
    bar.add_column(width=40)
    bar.add_column()
    bar.add_row("budget", ProgressBar(total=float(budget or max(done, 1)), completed=float(done), width=40),
                f"{done}/{budget}" if budget else str(done))

    facts = Table.grid(padding=(0, 2))
    facts.add_column(style="bold")
    facts.add_column()
    best = run.best_candidate
    facts.add_row("best score", f"[b green]{run.best_score:.3f}[/b green]" + (f"  ({best})" if best else ""))
    if run.status in DONE:  # an ended run works on nothing: what it left instead
        for label, value in final_state(run):
            facts.add_row(label, Text(value))
    elif stage in END_NOTES:  # the search's last action is over
        facts.add_row("now", Text(end_activity(run)))
    else:
        facts.add_row("current action", Text(run.current_action() or "-"))
    facts.add_row("LLM spend", spend_text(run))
    last_at = max((e.created_at for e in run.evaluations), default=None)
    if run.status not in DONE and last_at is not None and now - last_at > STALE_S:
        facts.add_row("[yellow]warning[/yellow]",
                      f"[yellow]no evaluation for {int(now - last_at)} s: is the search process alive?[/yellow]")

    recent = Table(title=f"last {min(LAST, len(run.attempts))} evaluations", title_justify="left", box=None)
    for c in ("#", "candidate", "action", "status", "score"):
        recent.add_column(c, justify="right" if c in ("#", "score") else "left")
    for a in run.attempts[-LAST:]:
        color = STATUS_COLORS.get(a.status, "red")
        recent.add_row(str(a.n), a.candidate_id, Text(a.action or "-", overflow="ellipsis", no_wrap=True),
                       f"[{color}]{a.status}[/{color}]", f"{a.score:.3f}")
    return Group(head, bar, facts, recent)


def end_activity(run: RunData) -> str:
    """A run at its end in a line: how far the timing of its best again has come (the `confirm` evaluations since its
    last search evaluation), or the candidate the holdout judges."""
    if run.stage != TIMING_AGAIN:
        return f"the holdout evaluation of {run.chosen_candidate} (best.py)"
    top, times = own_counts(run.meta.get("config"))
    count = len(top_candidates(run.evaluations, run.best_candidate, top))
    evals = run.all_evaluations
    last = max((i for i, e in enumerate(evals) if e.kind == "search"), default=-1)
    done = sum(1 for e in evals[last + 1:] if e.kind == "confirm")
    return f"timing its {count} best again, {times} times each, in turns: {done}/{count * times} evaluations"


def final_state(run: RunData) -> list[tuple[str, str]]:
    """A run in a final state, as (label, value) rows: its status and why, its result (the pick, or the search's best,
    in best.py) with the holdout score, and for a run cut short the action it was working on."""
    rows = [("final state", status_text(run))]
    chosen = run.chosen_candidate
    if chosen is not None:
        hold = run.holdout_result()
        rows.append(("result", f"{chosen} (best.py)" + (f", holdout {holdout_text(hold)}" if hold is not None else "")))
    if run.status in ("stopped", "interrupted") and (action := run.current_action()):
        rows.append(("stopped while on", action))
    return rows


def watch(path: Path, console: Console, interval: float = 1.0, once: bool = False,
          sleep: Callable[[float], None] = time.sleep) -> RunData:
    """Redraw until the run reaches a final state; returns the last state read. Transient read errors are retried."""
    run = load_run(path)
    if once or run.status in DONE:
        console.print(frame(run))
        return run
    with Live(frame(run), console=console, refresh_per_second=4, transient=False) as live:
        while run.status not in DONE:
            sleep(interval)
            if not (path / "run.db").is_file():
                raise RunUnreadable(f"{path}/run.db disappeared while watching")
            try:
                run = load_run(path)
            except RunUnreadable:
                continue  # a writer mid-checkpoint: the next poll will read it
            live.update(frame(run))
    return run
