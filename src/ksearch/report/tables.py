"""Rich tables for the terminal."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from rich.console import Console, Group, RenderableType
from rich.measure import Measurement
from rich.padding import Padding
from rich.table import Table
from rich.text import Text

from ksearch.harness.result import EvalResult
from ksearch.search.confirm import Confirmation
from ksearch.tasks.base import Task

STATUS_STYLE = {"passed": "green", "timeout": "yellow"}


def fmt_time(s: float | None) -> str:
    if s is None:
        return "-"
    if s < 1e-3:
        return f"{s * 1e6:.1f} us"
    if s < 1:
        return f"{s * 1e3:.3f} ms"
    return f"{s:.3f} s"


def fmt_x(v: float | None) -> str:
    return "-" if v is None else f"{v:.2f}x"


def scored(candidate: str | None, score: float | None) -> str:
    """A score with the candidate it belongs to, `c0001 1.085`: a run's search best and its pick (the result, which
    the holdout judges) may be two candidates, so a score without its name is ambiguous."""
    if score is None:
        return "-"
    return f"{candidate} {score:.3f}" if candidate else f"{score:.3f}"


def compact_table(title: str | None = None, **kw: Any) -> Table:
    """The report's table style: no box, one space between columns, underlined headers, the title on the left; an
    80-column terminal shows every number of its tables whole."""
    return Table(title=title, title_justify="left", box=None, padding=(0, 1), header_style="bold underline",
                 pad_edge=False, **kw)


def fitted_table(console: Console, title: str, columns: Sequence[str], rows: Sequence[Sequence[str]],
                 caption: str | None = None) -> RenderableType:
    """The rows as a table where the console is wide enough for every cell whole; otherwise each row as its first
    cell on a line of its own and `column: value` pairs below it, since a table squeezed into a narrow terminal cuts
    every cell short. Cells may hold rich markup."""
    t = Table(title=title, caption=caption, caption_justify="left")
    for col in columns:
        t.add_column(col)
    for row in rows:
        t.add_row(*row)
    if Measurement.get(console, console.options.update_width(10**4), t).maximum <= console.width:
        return t
    parts: list[RenderableType] = [Text(title, style="bold")]
    for first, *rest in rows:
        parts.append(Text.from_markup(first, style="bold"))
        pairs = "; ".join(f"{col}: {cell}" for col, cell in zip(columns[1:], rest, strict=True))
        parts.append(Padding(Text.from_markup(pairs), (0, 0, 0, 2)))
    if caption:
        parts.append(Text(caption, style="dim"))
    return Group(*parts)


def tasks_table(tasks: list[Task], console: Console) -> RenderableType:
    rows = []
    for task in tasks:
        cpu = [w.name for w in task.workloads if w.tier == "cpu"]
        gpu = [w.name for w in task.workloads if w.tier == "gpu"]
        # The default said in words as well as in bold: piped or without colour, bold is gone.
        bases = ", ".join(f"[b]{b} (default)[/b]" if b == task.default_baseline else b for b in task.baselines)
        rows.append((task.name, task.kind, str(len(cpu)), str(len(gpu)), bases, ", ".join(task.forbidden) or "-"))
    return fitted_table(console, "tasks", ("task", "kind", "cpu workloads", "gpu workloads", "baselines",
                                           "forbidden"), rows)


def backends_table(rows: list[dict[str, Any]], console: Console) -> RenderableType:
    cells = []
    for r in rows:
        p, env = r["profile"], r["environment"]
        peaks = p.get("peak_tflops") or {}
        smem = p.get("shared_memory_kb") or {}
        cells.append((
            r["backend"], f"{env.get('device')} [dim]({p.get('id')})[/dim]", str(env.get("mlx")),
            f"{p['memory_gb']} GB" if p.get("memory_gb") else "-",
            f"{p['bandwidth_gbs']} GB/s" if p.get("bandwidth_gbs") else "-",
            f"{peaks.get('float16', '-')} / {peaks.get('float32', '-')} TFLOP/s" if peaks else "-",
            f"{smem.get('default', '-')} KB (max {smem.get('max_opt_in', '-')})" if smem else "-",
            str(p.get("simd_width", "-")),
        ))
    notes = [f"{r['backend']}: {r['environment']['timing']}" for r in rows if r["environment"].get("timing")]
    return fitted_table(console, "backends (first = default; an emulation only when asked for by name)",
                        ("backend", "device", "MLX", "memory", "bandwidth", "peak fp16 / fp32",
                         "shared/threadgroup mem", "SIMD"), cells, "\n".join(notes) or None)


#: The verdicts reached by comparing outputs: only theirs show errors. A candidate that timed out, crashed or was
#: refused left its trials unfinished; errors of the few that ran would read as a correctness check it passed.
COMPARED = ("passed", "wrong_answer")


def _eval_verdict(r: EvalResult) -> Text:
    """The verdict in one line: status, score (`-` where no search workload was evaluated) and holdout score."""
    style = STATUS_STYLE.get(r.status, "red")
    score = r.search_score()
    line = Text.assemble(f"{r.task} on {r.backend}: ", (r.status, style),
                         f"  score {'-' if score is None else f'{score:.3f}'}")
    if r.holdout_score is not None:
        line.append(f"  holdout {r.holdout_score:.3f}")
    line.append(f" (geomean speedup vs {r.baseline})")
    if r.timing:
        # An emulated device: the verdict counts, the times are the emulator's (never shown as the device's).
        line.append("  (emulator times, not the device's)")
    return line


def _clipped(message: str, limit: int = 1500) -> str:
    """A long message's first line (the workload and what failed) and its end: the error itself comes last in a
    traceback, and the start of a long one is frames of the harness."""
    if len(message) <= limit:
        return message
    head = message.split("\n", 1)[0][:200]
    return f"{head}\n[...]\n{message[-(limit - len(head)):]}"


def eval_table(r: EvalResult) -> RenderableType:
    """The verdict, a row per workload, then the emulator's note and the candidate's message as text of the
    console's width (a table's caption wraps at the table's width, which a failed verdict leaves at two columns).
    Where no workload has a figure (a candidate that did not compile or run), there is no table: names alone say
    nothing."""
    cols = ["workload", "split", "latency", "spread", "baseline", "speedup", "roofline", "max abs err"]
    compared = r.status in COMPARED
    rows = [(w.name, w.split, fmt_time(w.latency_s),
             "-" if w.latency_spread is None else f"{w.latency_spread * 100:.0f}%",
             fmt_time(w.baseline_latency_s), fmt_x(w.speedup),
             "-" if w.roofline_fraction is None else f"{w.roofline_fraction * 100:.1f}%",
             "-" if w.max_abs_err is None or not compared else f"{w.max_abs_err:.2e}") for w in r.workloads]
    # A column with nothing in it (the roofline on the CPU) leaves its room to the workload names.
    keep = [i for i, c in enumerate(cols) if c in ("workload", "split") or any(row[i] != "-" for row in rows)]
    # A candidate's message is text, never markup.
    notes = [Text(text) for text in (f"timing: {r.timing}" if r.timing else "", _clipped(r.message)) if text]
    if len(keep) == 2:
        return Group(_eval_verdict(r), *notes)
    t = compact_table()
    for i in keep:
        t.add_column({"max abs err": "max err"}.get(cols[i], cols[i]), no_wrap=cols[i] != "workload",
                     overflow="fold", justify="left" if cols[i] in ("workload", "split") else "right")
    for row in rows:
        t.add_row(*[row[i] for i in keep])
    # The verdict above the table, not as its title: a title wraps at the table's width, however wide the terminal.
    return Group(_eval_verdict(r), t, *notes)


def confirmation_table(out: Confirmation) -> Table:
    """`ksearch confirm`'s result: each candidate's search score beside its new scores and their median."""
    t = Table(title=f"run {out.run}: its best {len(out.candidates)} timed again {out.times} times each, in turns")
    for col in ("candidate", "search score", "timed again", "median"):
        t.add_column(col)
    pick = out.pick
    for c in out.candidates:
        again = ", ".join(f"{x:.3f}" if s == "passed" else s for x, s in zip(c.scores, c.statuses, strict=True))
        name = f"{c.candidate} (pick)" if pick is not None and c is pick else c.candidate
        t.add_row(name, f"{c.search_score:.3f}", again, "-" if c.median is None else f"{c.median:.3f}")
    t.caption = (f"pick: {pick.candidate} at {pick.median:.3f}x (median)" if pick is not None and pick.median
                 is not None else "pick: none passed every evaluation again")
    return t
