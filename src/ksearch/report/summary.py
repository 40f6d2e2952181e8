"""`ksearch report RUN`: the terminal summary of one run."""

from __future__ import annotations

import datetime as _dt
from typing import Any

from rich.console import Group, RenderableType
from rich.markup import escape
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from ksearch.backends import emulation_note
from ksearch.harness.result import EvalResult
from ksearch.report.cycles import Cycle
from ksearch.report.rundata import RunData
from ksearch.report.start_check import start_check
from ksearch.report.tables import STATUS_STYLE, compact_table, fmt_time, fmt_x
from ksearch.report.tree import rich_tree
from ksearch.report.workers import workers_text


def when(ts: Any) -> str:
    """created_at / finished_at are epoch seconds in the loop; accept ISO strings too."""
    if isinstance(ts, int | float):
        return _dt.datetime.fromtimestamp(ts, _dt.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    return str(ts) if ts else "-"


def budget_text(run: RunData) -> str:
    done, budget = run.evaluations_done, run.budget
    dup = run.meta.get("duplicates_skipped")
    text = f"{done}/{budget}" if budget else str(done)
    if isinstance(dup, int) and dup:
        text += f" ({dup} duplicates skipped, not counted)"
    return text


def usage_line(u: dict[str, Any]) -> str:
    """An LLM ledger (search.ledger) in one line: calls with their retries, failures and losses, then what they
    counted against the caps, and any claim past a call's bound."""
    calls = int(u.get("calls") or 0)
    extra = [f"{int(u.get('retries') or 0)} retries"]
    if u.get("failed_calls"):
        extra.append(f"{int(u['failed_calls'])} failed")
    if u.get("lost_calls"):
        extra.append(f"{int(u['lost_calls'])} lost to a kill, counted at their bound")
    text = (f"{calls} calls ({', '.join(extra)}), {int(u.get('tokens_in') or 0):,} tokens in / "
            f"{int(u.get('tokens_out') or 0):,} out, ${float(u.get('cost_usd') or 0):.4f}")
    if u.get("claimed_tokens") is not None:
        text += (f"; the endpoint claimed {int(u['claimed_tokens']):,} tokens / ${float(u['claimed_cost_usd']):.4f} "
                 "past a call's bound, counted at the bound")
    return text


def spend_text(run: RunData) -> str:
    u = run.llm_ledger()
    if not u.get("calls") and not u.get("lost_calls"):
        return "no LLM calls"
    return usage_line(u)


def status_text(run: RunData) -> str:
    reason = run.stop_reason
    return f"{run.stage}: {reason}" if reason else run.stage


def events_text(run: RunData) -> str:
    counts: dict[str, int] = {}
    for e in run.notable_events():
        counts[e.kind] = counts.get(e.kind, 0) + 1
    return ", ".join(f"{k.replace('_', ' ')} {v}" for k, v in counts.items()) or "none"


def headline(run: RunData) -> list[tuple[str, str]]:
    """The facts both the terminal and the HTML page lead with, as (label, value)."""
    m = run.meta
    best = run.best_candidate
    best_res = run.best_result()
    hold = run.holdout_result()
    held = run.holdout_candidate
    counts = run.status_counts()
    return [
        ("run", run.run_id),
        ("task / backend", f"{run.task} on {run.backend}"),
        ("policy / strategy", f"{m.get('policy', '-')} / {m.get('strategy', '-')}"),
        ("status", status_text(run)),
        ("started / finished", f"{when(m.get('created_at'))} / {when(m.get('finished_at'))}"),
        ("best candidate", f"{best} (score {run.best_score:.3f}, vs baseline {best_res.baseline if best_res else '?'})"
         if best else "none passed"),
    ] + ([("the run's pick", f"{chosen} (best.py; its best timed again, the highest median)")]
         if (chosen := run.chosen_candidate) != best else []) + (
        [(f"{'best' if held in (None, best) else 'pick'} re-measured",
          f"{again:.3f} (its search workloads timed again in the holdout evaluation)")]
        if hold is not None and (again := hold.search_score_again()) is not None else []) + [
        ("holdout score", holdout_text(hold) + (f" ({held})" if hold is not None and held not in (None, best) else "")),
    ] + confirmation_rows(run) + [
        ("budget used", budget_text(run)),
        ("statuses", ", ".join(f"{k} {v}" for k, v in sorted(counts.items(), key=lambda kv: -kv[1])) or "-"),
        ("LLM spend", spend_text(run)),
        ("world model", run.world_model_origin()),
        ("proposer errors", str(sum(1 for e in run.events if e.kind == "policy_error"))),
        ("loop events", events_text(run)),
        ("seed", str(m.get("seed", "-"))),
    ] + ([("workers", workers)] if (workers := workers_text(run)) else []) + (
        [("timing", note)] if (note := emulation_note(run.backend)) else []) + (
        [("timing check", check)] if (check := start_check(run)) else [])


def confirmation_rows(run: RunData) -> list[tuple[str, str]]:
    """"timed again": the confirmation that chose the run's result; "timed again later": a `ksearch confirm` after
    it that was not adopted, a check beside the result."""
    own, later = run.confirmations()
    return ([("timed again", confirmation_text(own))] if own else []) + (
        [("timed again later", confirmation_text(later, run.chosen_candidate))] if later else [])


def confirmation_text(c: dict[str, Any], stays: str | None = None) -> str:
    """A confirmation's pick in a line: its median, what it was chosen from and who timed it (the run's end, `ksearch
    confirm`). `stays`: the run's result, where this is a later check that was not adopted."""
    by = c.get("by") or ""  # files written before they named who timed them: none
    if stays is not None:
        by = f"{by or 'ksearch confirm'}, not adopted"
    among = f"its {len(c['candidates'])} best {c.get('times')} times each, in turns" + (f" ({by})" if by else "")
    among += f"; the run's result stays {stays}" if stays is not None else ""
    if not c.get("pick"):
        return f"none passed every evaluation again ({among})"
    return f"{c['pick']} at {float(c.get('pick_median') or 0):.3f} (median; {among})"


def holdout_text(hold: EvalResult | None) -> str:
    """The holdout score and the verdict's status, `2.646 (passed)`."""
    if hold is None:
        return "not evaluated"
    score = hold.holdout_score if hold.holdout_score is not None else hold.score
    return f"{score:.3f} ({hold.status})"


def workload_rows(run: RunData) -> list[dict[str, Any]]:
    """Per-workload figures of the run's result (its pick, else the search's best: RunData.chosen_candidate): its
    search evaluation, then the holdout workloads."""
    rows: list[dict[str, Any]] = []
    seen: set[tuple[str, str]] = set()
    for res in (run.search_result(run.chosen_candidate), run.holdout_result()):
        if res is None:
            continue
        for w in res.workloads:
            key = (w.name, w.split)
            if key in seen:
                continue
            seen.add(key)
            rows.append({"workload": w.name, "split": w.split, "status": w.status, "latency": fmt_time(w.latency_s),
                         "baseline": fmt_time(w.baseline_latency_s), "speedup": fmt_x(w.speedup),
                         "roofline": "-" if w.roofline_fraction is None else f"{w.roofline_fraction * 100:.1f}%",
                         "max abs err": "-" if w.max_abs_err is None else f"{w.max_abs_err:.2e}"})
    return rows


def workload_table(run: RunData) -> Table:
    rows = workload_rows(run)
    cols = ["workload", "split", "status", "latency", "baseline", "speedup", "roofline", "max abs err"]
    if all(r["status"] == "passed" for r in rows):
        cols.remove("status")  # the usual case for a best candidate; the room goes to the numbers
    # Tight padding and short headers: the table fits an 80-column terminal without truncating numbers.
    whose = "best candidate" if run.chosen_candidate == run.best_candidate else "the run's pick"
    title = f"{whose} per workload" + (" (emulator times, not the device's)" if emulation_note(run.backend) else "")
    t = compact_table(title)
    for c in cols:
        t.add_column({"max abs err": "max err"}.get(c, c), no_wrap=True, justify="left" if c in ("workload", "split", "status") else "right")
    for r in rows:
        style = STATUS_STYLE.get(r["status"], "red")
        t.add_row(*[f"[{style}]{r[c]}[/{style}]" if c == "status" else r[c] for c in cols])
    return t


#: Edits listed per cycle in the terminal (all of them are on the HTML page), and characters per edit.
TERMINAL_EDITS, EDIT_CHARS = 6, 220


def _short(text: str, limit: int = EDIT_CHARS) -> str:
    """The text on one line, cut at a word's end where it is longer than `limit`: a cut word reads as another."""
    flat = " ".join(text.split())
    if len(flat) <= limit:
        return flat
    cut = flat[: limit - 1]
    return (cut.rsplit(" ", 1)[0] if " " in cut else cut) + " …"


def cycles_table(run: RunData) -> RenderableType | None:
    """One row per refinement cycle (the action, attempts, best, why it ended), then each cycle's world-model edits
    on lines of their own below the table: in a column of the table they were squeezed into a few characters."""
    cycles = run.cycles()
    if not cycles:
        return None
    t = compact_table("refinement cycles")
    for col in ("#", "round", "action", "tries", "best", "outcome", "ended because"):
        t.add_column(col, justify="right" if col in ("#", "round", "tries", "best") else "left",
                     no_wrap=col in ("#", "round", "tries", "best"))
    for c in cycles:
        ended = c.reason_text + (f": {c.why}" if c.why else "")
        t.add_row(str(c.n), str(c.round), escape(f"{c.node_id} {c.title}"), str(c.attempts),
                  "-" if c.best_score is None else f"{c.best_score:.3f}", c.outcome, escape(ended))
    edits = compact_table("world-model edits by cycle", show_header=False)
    edits.add_column(no_wrap=True, justify="right")
    edits.add_column(overflow="fold")
    for c in cycles:
        edits.add_row(f"cycle {c.n}", "\n".join(_edit_lines(c)) or "[dim]none[/dim]")
    return Group(t, Text(), edits)


def _edit_lines(c: Cycle) -> list[str]:
    """A cycle's edits as markup lines: applied or rejected, when, what (shortened; --html has them whole)."""
    lines = []
    for e in c.edits[:TERMINAL_EDITS]:
        mark = "[green]✓[/green]" if e.applied else "[red]✗ rejected:[/red]"
        lines.append(f"{mark} [dim]{e.when}:[/dim] {escape(_short(e.text))}")
    if len(c.edits) > TERMINAL_EDITS:
        lines.append(f"[dim]… {len(c.edits) - TERMINAL_EDITS} more (see --html)[/dim]")
    return lines


def profile_renderables(run: RunData) -> list[RenderableType]:
    """The counter table of the profiled candidates (or why there are no counters) and the roofline position of the
    best candidates."""
    from ksearch.report.profiles import counters_note, profile_table, profiles_by_candidate, roofline_table

    out: list[RenderableType] = []
    items = profiles_by_candidate(run)
    if items:
        out.append(profile_table(list(items)))
    note = counters_note(run.backend)
    if note and not any(str(r.get("note") or "").startswith(note) for _, r in items):  # else the table's caption
        out.append(Text(note, style="dim"))
    roof = roofline_table(run)
    if roof is not None:
        out.append(roof)
    return out


def summary_renderable(run: RunData, show_tree: bool = True) -> RenderableType:
    facts = Table.grid(padding=(0, 2))
    facts.add_column(style="bold")
    facts.add_column()
    for label, value in headline(run):
        facts.add_row(label, Text(value))
    parts: list[RenderableType] = [Panel(facts, title=f"ksearch run {run.run_id}", title_align="left")]
    if workload_rows(run):
        parts.append(workload_table(run))
    parts += profile_renderables(run)
    cycles = cycles_table(run)
    if cycles is not None:
        parts.append(cycles)
    actions = run.best_actions()
    if actions:
        path = Text("path to the best: ", style="bold")
        path.append(" → ".join(actions), style="")
        parts.append(path)
    if show_tree:
        tree = rich_tree(run.world_model(), [str(n.get("node_id")) for n in run.best_path()])
        if tree is not None:
            parts.append(tree)
    return Group(*parts)
