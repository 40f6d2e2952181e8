"""`ksearch report` and the HTML page, per refinement cycle: why it ended (stagnation, could not beat the parent, the
budget) and which world-model edits were applied or rejected, with their reasons. From a real scripted run."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from test_report_fakerun import make_fake_run
from test_search_cycles import Scripted
from test_search_loop import scripted_judge
from typer.testing import CliRunner

from ksearch.cli import app
from ksearch.config import RunConfig
from ksearch.report.html import render_html
from ksearch.report.rundata import load_run
from ksearch.search.start import create_run, execute


class Picky(Scripted):
    """Its first edit after each cycle names a parent that does not exist (refused); the second is the scripted one."""

    def __init__(self, plan: dict[str, list[tuple[str, float]]]) -> None:
        super().__init__(plan, first=("A",))
        self.tries = 0

    def update(self, ctx: Any, wm: dict[str, Any], cycle: list[Any], rejection: str | None,
               evidence: Any = None) -> dict[str, Any]:
        self.tries += 1
        if cycle and rejection is None:
            return {"ops": [{"op": "insert_node", "parent_id": "ghost", "node": {"action": {"title": "x"}}}]}
        return super().update(ctx, wm, cycle, rejection, evidence)


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tmp = tmp_path_factory.mktemp("cycles")
    plan = {"A": [("passed", 2.0)] + [("passed", 1.9)] * 5,
            "follow n1": [("passed", 1.0 + 0.1 * k) for k in range(20)]}
    cfg = RunConfig(task="softmax", backend="mlx-cpu", budget=12, runs_dir=str(tmp), stagnation_window=3)
    store, _, _ = create_run(cfg)
    execute(store, cfg, evaluate=scripted_judge, policy=Picky(plan))
    store.close()
    return Path(store.path)


def test_every_cycle_says_why_it_ended_and_what_became_of_its_edits(run_dir: Path) -> None:
    cycles = load_run(run_dir).cycles()
    assert [c.title for c in cycles[:2]] == ["A", "follow n1"]
    a, follow = cycles[0], cycles[1]
    assert a.reason == "stagnation" and a.outcome == "solved" and a.attempts == 4
    assert follow.reason == "behind_parent" and "parent's score 2" in follow.why
    assert cycles[-1].reason == "budget"
    # The refused edit with its reason, then the applied one with what it changed.
    after = [e for e in a.edits if e.when == "after the cycle"]
    assert [e.applied for e in after] == [False, True]
    assert "ghost" in after[0].text and "does not exist" in after[0].text
    assert "inserted" in after[1].text and "under n1" in after[1].text
    # The frontier refresh before a cycle (one first action: the frontier is short) is listed with that cycle.
    assert any(e.when == "frontier refresh before the cycle" for e in a.edits)


def test_the_terminal_report_lists_the_cycles(run_dir: Path) -> None:
    r = CliRunner().invoke(app, ["report", str(run_dir), "--no-tree"], env={"COLUMNS": "200"})
    assert r.exit_code == 0, r.output
    out = " ".join(r.output.split())  # cells wrap
    assert "refinement cycles" in out
    for text in ("stagnation", "could not beat the parent", "budget spent", "rejected", "does not exist",
                 "inserted"):
        assert text in out, text


def test_the_edits_read_whole_in_80_columns(run_dir: Path) -> None:
    # A process of its own: the CLI's console takes its width once a process.
    r = subprocess.run([sys.executable, "-m", "ksearch.cli", "report", str(run_dir), "--no-tree"], capture_output=True,
                       text=True, timeout=120, env={**os.environ, "COLUMNS": "80"})
    assert r.returncode == 0, r.stderr
    lines = r.stdout[r.stdout.index("refinement cycles"):].splitlines()
    assert all(len(line.rstrip()) <= 80 for line in lines)
    assert not re.search(r"\w…", r.stdout), r.stdout  # no word cut short
    edits = " ".join(" ".join(lines[next(i for i, ln in enumerate(lines) if "world-model edits" in ln):]).split())
    assert "cycle 1 ✓ frontier refresh before the cycle: no change ✗ rejected: after the cycle: ops[0] (insert_node): " \
           "parent_id 'ghost' does not exist; existing ids: root, n1 ✓ after the cycle: inserted n2 'follow n1' " \
           "under n1 cycle 2" in edits, edits


def test_the_html_page_lists_the_cycles(run_dir: Path) -> None:
    page = render_html(load_run(run_dir))
    section = page[page.index('id="cycles"'):page.index('id="workloads"')]
    assert section.count('class="cycle-row"') == len(load_run(run_dir).cycles())
    for text in ("could not beat the parent", "stagnation", "edit-rejected", "edit-applied", "does not exist",
                 "parent&#x27;s score 2"):
        assert text in section, text


def test_a_run_recorded_before_cycle_reasons_still_reports(tmp_path: Path) -> None:
    run = load_run(make_fake_run(tmp_path))
    cycles = run.cycles()
    assert cycles and cycles[0].reason == "not recorded"
    assert "refinement cycles" in render_html(run) or 'id="cycles"' in render_html(run)


def test_the_cycles_of_a_run_with_several_evaluators_each_keep_their_own_attempts(tmp_path: Path) -> None:
    # Cycles on several nodes at once: every verdict and every end goes to the cycle of its node, not to the one
    # selected last.
    from test_parallel_search import NewEachTime

    from ksearch.search.pool import InlinePool

    cfg = RunConfig(task="softmax", backend="mlx-cpu", budget=11, runs_dir=str(tmp_path), seed=7, stagnation_window=3)
    store, _, _ = create_run(cfg)
    policy = NewEachTime({"A": [("passed", 1.2), ("passed", 1.5)], "B": [("wrong_answer", 0)], "C": [("passed", 2)],
                          "D": [("passed", 1.1)]})
    execute(store, cfg, policy=policy, pool=InlinePool(scripted_judge, 3, "mlx-cpu:test"))
    store.close()
    run = load_run(Path(store.path))
    cycles = run.cycles()
    by_node = {e.data["node_id"]: 0 for e in run.events if e.kind == "evaluation"}
    for e in run.events:
        if e.kind == "evaluation":
            by_node[e.data["node_id"]] += 1
    assert len(cycles) >= 3
    assert all(c.reason not in ("not recorded", "in progress") and c.attempts >= 1 for c in cycles), cycles
    assert sum(c.attempts for c in cycles) == sum(n for node, n in by_node.items() if node != "root")
    ends = [e for e in run.events if e.kind == "cycle_end"]
    assert sorted((c.node_id, c.attempts) for c in cycles) == sorted((e.data["node_id"], e.data["attempts"])
                                                                     for e in ends)
