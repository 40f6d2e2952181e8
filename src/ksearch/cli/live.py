"""A search run on the terminal: the live view while it runs (budget bar, best score, current action, last statuses,
frontier top) and the summary table at the end."""

from __future__ import annotations

from collections import deque
from pathlib import Path
from typing import Any

from rich.console import Group
from rich.live import Live
from rich.progress import BarColumn, Progress, TextColumn
from rich.table import Table
from rich.text import Text

from ksearch.report.start_check import start_line
from ksearch.report.summary import usage_line
from ksearch.search.start import RunOutcome

# How each `--strategy` is named in the live view's title.
STRATEGY_NAMES = {"ksearch": "K-Search", "evolve": "evolutionary search", "greedy": "greedy search"}


class LiveView:
    """The `on_event` callback of search.start.start_run. The display starts at the run's "run_start" event (so a
    run refused before it exists prints nothing here) and ends, with a last frame, when the `with` block does."""

    def __init__(self, enabled: bool = True) -> None:
        self.enabled = enabled
        self.title = ""
        self.best = 0.0
        self.done = 0
        self.action = "-"
        self.last: deque[str] = deque(maxlen=8)
        self.notes: deque[str] = deque(maxlen=3)
        self.frontier: list[str] = []
        self.progress = Progress(TextColumn("{task.description}"), BarColumn(), TextColumn("{task.completed}/{task.total}"))
        self.bar = self.progress.add_task("evaluations", total=None)
        self.live: Live | None = None
        self.path: Path | None = None  # the run's directory, once it exists
        #: With several evaluators: worker id -> [state, candidate, evaluations], and when verdicts came.
        self.workers: dict[str, list[Any]] = {}
        self.first_verdict: float | None = None
        self.last_verdict: float | None = None
        self.verdicts = 0

    def __enter__(self) -> LiveView:
        return self

    def __exit__(self, *exc: Any) -> None:
        if self.live:
            self.live.update(self._render())
            self.live.__exit__(*exc)
            self.live.console.print()

    def _start(self, data: dict[str, Any]) -> None:
        self.path = Path(data["path"])
        # The path on a line of its own: a run directory is long enough to wrap mid-title in an 80-column terminal.
        strategy = STRATEGY_NAMES.get(data["strategy"], data["strategy"])
        self.title = (f"{strategy} on {data['task']} ({data['backend']}, {data['policy']} policy)\n"
                      f"run directory {data['path']}")
        self.progress.update(self.bar, total=data["budget"])
        if self.enabled:
            self.live = Live(self._render(), refresh_per_second=4, transient=False)
            self.live.__enter__()

    def _render(self) -> Group:
        t = Table.grid(padding=(0, 2))
        t.add_row("best score", f"{self.best:.3f}x")
        t.add_row("current action", self.action)
        t.add_row("last statuses", " ".join(self.last) or "-")
        for i, f in enumerate(self.frontier):
            t.add_row("frontier" if i == 0 else "", f)
        for wid, (state, cand, count) in self.workers.items():
            t.add_row(f"worker {wid}", f"{state:<10} {cand or '-':<8} {count} judged")
        if self.workers and self.first_verdict and self.last_verdict and self.last_verdict > self.first_verdict:
            rate = (self.verdicts - 1) / (self.last_verdict - self.first_verdict) * 3600
            t.add_row("evaluations/hour", f"{rate:.0f}")
        for n in self.notes:
            t.add_row("", Text(n, style="dim"))
        return Group(Text(self.title, style="bold"), self.progress, t)

    def __call__(self, kind: str, data: dict[str, Any]) -> None:
        if kind == "run_start":
            self._start(data)
        elif kind == "workers":
            self.workers = {w["id"]: [w["state"], w.get("candidate"), w.get("evaluations", 0)]
                            for w in data["workers"]}
        elif kind == "dispatch" and data.get("worker") in self.workers:
            self.workers[data["worker"]][:2] = ["judging", data.get("candidate")]
        elif kind == "worker_lost" and data.get("worker") in self.workers:
            self.workers[data["worker"]][:2] = ["restarting", None]
            self.notes.append(f"worker {data['worker']} died judging {data.get('candidate')}: judged again")
        elif kind == "evaluation":
            if data.get("worker") in self.workers:
                w = self.workers[data["worker"]]
                w[0], w[1], w[2] = "idle", None, w[2] + 1
                ended = float(data.get("ended_at") or 0.0)
                self.first_verdict = self.first_verdict or ended
                self.last_verdict, self.verdicts = ended, self.verdicts + 1
            self.done = data["evaluations_done"]
            self.best = max(self.best, data.get("best_score") or 0.0)
            style = "green" if data["status"] == "passed" else "red"
            self.last.append(f"[{style}]{data['status'][:7]}[/{style}]")
            self.progress.update(self.bar, completed=self.done)
        elif kind == "confirm":  # a finished run's best, timed again (search/confirm.py)
            self.action = (f"its best timed again: {data.get('candidate')} {data.get('status')} "
                           f"{float(data.get('score') or 0.0):.3f}x")
        elif kind == "select":
            self.action = f"{data.get('title')} ({data.get('node_id')}, V={data.get('priority', 0):.2f})"
            self.frontier = [f"V={f['priority']:.2f}  {f['title']} ({f['node_id']})" for f in data.get("frontier", [])]
        elif kind == "profile_note":
            # Said once per run, in one line, above the live view (or alone with --quiet); the search goes on.
            from rich.console import Console

            (self.live.console if self.live else Console(stderr=True)).print(
                Text(f"profile: {data.get('message')}", style="yellow"), soft_wrap=True)
        elif kind in ("backtrack", "too_hard", "policy_error", "edit_rejected", "world_model_fallback",
                      "call_lost", "llm_budget", "proposer_failed"):
            self.notes.append(f"{kind}: {str(data)[:100]}")
        if self.live:
            self.live.update(self._render())


def final_table(o: RunOutcome) -> Table:
    s = o.state
    t = Table(title=f"run {o.path.name}: {s.evaluations_done} evaluations "
                    f"({s.duplicates_skipped} duplicates skipped, {s.policy_errors} proposer errors)",
              show_header=False)
    t.add_column("")
    t.add_column("", overflow="fold")  # paths print whole, folded where the terminal is narrow, never cut
    t.add_row("status", Text(f"{o.status}: {o.stop_reason}" if o.stop_reason else o.status))
    u = o.llm_usage or {}
    if u.get("calls") or u.get("lost_calls"):
        t.add_row("LLM spend", Text(usage_line(u)))
    picked = o.chosen not in (None, s.best_candidate)  # the confirmation picked another: best.py holds that one
    best_at = "" if picked else f" ({o.path / 'best.py'})"
    # Paths and messages as Text: a cell's plain string is rich markup, and a path with "[/...]" in it is not.
    t.add_row("best candidate", Text(f"{s.best_candidate}{best_at}" if s.best_candidate else "none passed"))
    t.add_row("best score", f"{s.best_score:.3f}x (start {s.start_score:.3f}x)")
    if o.best_result:  # the search's best, workload by workload
        for w in o.best_result.get("workloads", []):
            sp = w.get("speedup")
            t.add_row(Text(f"  {w['name']}"), "-" if sp is None else f"{sp:.3f}x vs {o.best_result.get('baseline')}")
    if picked:
        t.add_row("the run's pick", Text(f"{o.chosen} ({o.path / 'best.py'}; its best timed again, the highest "
                                         "median)"))
    if o.holdout is not None:
        whose = "pick" if picked else "best"  # the holdout judges the run's result
        if (again := o.holdout.search_score_again()) is not None:  # the best score leans high: the highest of many
            t.add_row(f"{whose} re-measured", f"{again:.3f}x (its search workloads, timed again with the holdout)")
        t.add_row("holdout score", f"{o.holdout.holdout_score or 0:.3f}x ({o.holdout.status}"
                  + (f", {o.chosen})" if picked else ")"))
    if o.best_result and o.best_result.get("timing"):
        t.add_row("timing", Text(str(o.best_result["timing"])))
    baseline = (o.best_result or {}).get("baseline")  # a run scores every candidate against one baseline
    if (check := start_line(s.start_candidate, s.start_score, baseline)) is not None:
        t.add_row("timing check", Text(check, style="yellow"))
    t.add_row("run directory", Text(str(o.path)))
    return t
