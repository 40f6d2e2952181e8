"""The live view of a running search: budget bar, best score, current action, last statuses, frontier top."""

from __future__ import annotations

from collections import deque
from typing import Any

from rich.console import Group
from rich.live import Live
from rich.progress import BarColumn, Progress, TextColumn
from rich.table import Table
from rich.text import Text


class LiveView:
    def __init__(self, budget: int, title: str, enabled: bool = True) -> None:
        self.budget = budget
        self.title = title
        self.best = 0.0
        self.done = 0
        self.action = "-"
        self.last: deque[str] = deque(maxlen=8)
        self.notes: deque[str] = deque(maxlen=3)
        self.frontier: list[str] = []
        self.progress = Progress(TextColumn("{task.description}"), BarColumn(), TextColumn("{task.completed}/{task.total}"))
        self.bar = self.progress.add_task("evaluations", total=budget)
        self.live = Live(self._render(), refresh_per_second=4, transient=False) if enabled else None

    def __enter__(self) -> LiveView:
        if self.live:
            self.live.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        if self.live:
            self.live.update(self._render())
            self.live.__exit__(*exc)
            self.live.console.print()

    def _render(self) -> Group:
        t = Table.grid(padding=(0, 2))
        t.add_row("best score", f"{self.best:.3f}x")
        t.add_row("current action", self.action)
        t.add_row("last statuses", " ".join(self.last) or "-")
        for i, f in enumerate(self.frontier):
            t.add_row("frontier" if i == 0 else "", f)
        for n in self.notes:
            t.add_row("", Text(n, style="dim"))
        return Group(Text(self.title, style="bold"), self.progress, t)

    def __call__(self, kind: str, data: dict[str, Any]) -> None:
        if kind == "evaluation":
            self.done = data["evaluations_done"]
            self.best = max(self.best, data.get("best_score") or 0.0)
            style = "green" if data["status"] == "passed" else "red"
            self.last.append(f"[{style}]{data['status'][:7]}[/{style}]")
            self.progress.update(self.bar, completed=self.done)
        elif kind == "select":
            self.action = f"{data.get('title')} ({data.get('node_id')}, V={data.get('priority', 0):.2f})"
            self.frontier = [f"V={f['priority']:.2f}  {f['title']} ({f['node_id']})" for f in data.get("frontier", [])]
        elif kind in ("backtrack", "too_hard", "policy_error", "edit_rejected"):
            self.notes.append(f"{kind}: {str(data)[:100]}")
        if self.live:
            self.live.update(self._render())
