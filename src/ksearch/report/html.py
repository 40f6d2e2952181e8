"""`ksearch report RUN --html FILE`: one self-contained page (inline CSS, inline SVG, a few lines of inline JS).

Nothing is fetched when the page opens: no CDN, no web fonts, no images by URL, so the file can be mailed or archived
and still read the same offline.
"""

from __future__ import annotations

import datetime as _dt
import json
from html import escape
from pathlib import Path

from ksearch import __version__
from ksearch.report.plots import STATUS_COLORS, trajectory_svg
from ksearch.report.rundata import RunData, wm_nodes
from ksearch.report.summary import budget_text, headline, spend_text, status_text, workload_rows
from ksearch.report.tree import tree_html
from ksearch.report.workers import timeline_svg

CSS = """
:root { --fg: #1f2328; --muted: #656d76; --line: #d0d7de; --accent: #1565c0; --best: #f9a825; }
* { box-sizing: border-box; }
body { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; color: var(--fg); margin: 0;
       background: #fafbfc; }
main { max-width: 1180px; margin: 0 auto; padding: 24px 28px 60px; }
h1 { font-size: 22px; margin: 0 0 4px; } h2 { font-size: 17px; margin: 32px 0 10px; border-bottom: 1px solid var(--line);
padding-bottom: 4px; }
.muted { color: var(--muted); }
.cards { display: grid; grid-template-columns: repeat(auto-fill, minmax(250px, 1fr)); gap: 8px 16px; margin: 16px 0; }
.card { background: #fff; border: 1px solid var(--line); border-radius: 6px; padding: 8px 12px; }
.card .k { font-size: 11px; text-transform: uppercase; letter-spacing: .04em; color: var(--muted); }
.card .v { font-size: 14px; word-break: break-word; }
.card.big .v { font-size: 22px; font-weight: 600; color: var(--accent); }
.chart svg { max-width: 100%; height: auto; background: #fff; border: 1px solid var(--line); border-radius: 6px; }
table.data { border-collapse: collapse; background: #fff; font-size: 13px; }
table.data th, table.data td { border: 1px solid var(--line); padding: 4px 9px; text-align: left; }
table.data td.num { text-align: right; font-variant-numeric: tabular-nums; }
table.data th { background: #f0f3f6; }
.st { font-weight: 600; }
.path { display: flex; flex-wrap: wrap; gap: 6px; align-items: center; margin: 8px 0; }
.path .step { background: #fff8e1; border: 1px solid var(--best); border-radius: 14px; padding: 2px 10px; }
.path .arrow { color: var(--muted); }
ul.wm-tree, ul.wm-tree ul { list-style: none; margin: 0; padding-left: 22px; }
ul.wm-tree { padding-left: 0; }
ul.wm-tree li { position: relative; margin: 6px 0; }
ul.wm-tree ul > li::before { content: ""; position: absolute; left: -14px; top: -6px; bottom: 50%; width: 12px;
  border-left: 1px solid #b0b8c1; border-bottom: 1px solid #b0b8c1; }
.wm-node { border: 1px solid var(--line); border-radius: 6px; padding: 6px 10px; max-width: 920px; }
.wm-node.open { border-style: dashed; }
.wm-node.failed { border-color: #e57373; }
.wm-node.best-path { border: 3px solid var(--best); box-shadow: 0 0 0 2px #fff3c4; }
.wm-head { font-weight: 600; }
.wm-score { margin-left: 8px; color: #1b5e20; font-variant-numeric: tabular-nums; }
.best-mark { margin-left: 8px; color: #b27b00; font-size: 12px; }
.wm-facts, .wm-desc { font-size: 12px; color: #444c56; }
.wm-node details summary { cursor: pointer; font-size: 12px; color: var(--accent); }
.wm-node pre { white-space: pre-wrap; font-size: 12px; margin: 2px 0 6px; background: rgba(255,255,255,.6);
  padding: 4px 6px; border-radius: 4px; }
table.impacts { font-size: 12px; border-collapse: collapse; margin: 4px 0; }
table.impacts td, table.impacts th { border: 1px solid var(--line); padding: 2px 6px; }
.badge { display: inline-block; font-size: 11px; font-weight: 600; border-radius: 10px; padding: 0 8px;
  text-transform: uppercase; letter-spacing: .03em; }
.badge.passed { background: #2e7d32; color: #fff; } .badge.failed { background: #c62828; color: #fff; }
.badge.open, .badge.solved { background: #e0e0e0; color: #333; } .badge.root { background: #1565c0; color: #fff; }
.legend { display: flex; gap: 14px; flex-wrap: wrap; font-size: 12px; margin-bottom: 8px; }
.legend span { display: inline-flex; gap: 5px; align-items: center; }
.sw { width: 14px; height: 14px; border-radius: 3px; border: 1px solid #999; display: inline-block; }
.toolbar button { font-size: 12px; margin-right: 6px; }
.src { background: #fff; border: 1px solid var(--line); border-radius: 6px; overflow-x: auto; font-size: 12.5px; }
.src pre { margin: 0; padding: 10px 12px; line-height: 1.4; }
footer { margin-top: 40px; font-size: 12px; color: var(--muted); }
table.cycles td { vertical-align: top; } ul.edits { margin: 0; padding-left: 16px; font-size: 12px; }
li.edit-rejected { color: #c62828; } li.edit-applied { color: #1b5e20; }
"""

# Expanding and collapsing the notes is the only behaviour; `data-ready` tells a headless test that the script ran.
JS = """
(function () {
  function setAll(open) {
    document.querySelectorAll('.wm-node details').forEach(function (d) { d.open = open; });
  }
  var e = document.getElementById('expand-all'), c = document.getElementById('collapse-all');
  if (e) { e.addEventListener('click', function () { setAll(true); }); }
  if (c) { c.addEventListener('click', function () { setAll(false); }); }
  document.body.setAttribute('data-ready', String(document.querySelectorAll('.wm-node').length));
})();
"""


def highlight_python(source: str) -> tuple[str, str]:
    """(html, css) for the source; pygments when installed (it comes with rich), else plain escaped text."""
    try:
        from pygments import highlight
        from pygments.formatters import HtmlFormatter
        from pygments.lexers import PythonLexer
    except ImportError:
        return f'<div class="src"><pre>{escape(source)}</pre></div>', ""
    fmt = HtmlFormatter(cssclass="src", linenos="inline", style="default")
    return highlight(source, PythonLexer(), fmt), fmt.get_style_defs(".src")


def _table(rows: list[dict[str, str]], cols: list[str], numeric: set[str], cls: str = "data") -> str:
    head = "".join(f"<th>{escape(c)}</th>" for c in cols)
    body = []
    for r in rows:
        cells = []
        for c in cols:
            v = escape(str(r.get(c, "")))
            if c == "status":
                color = STATUS_COLORS.get(str(r.get(c)), "#c62828")
                cells.append(f'<td class="st" style="color:{color}">{v}</td>')
            else:
                cells.append(f'<td class="num">{v}</td>' if c in numeric else f"<td>{v}</td>")
        body.append(f"<tr>{''.join(cells)}</tr>")
    return f'<table class="{cls}"><thead><tr>{head}</tr></thead><tbody>{"".join(body)}</tbody></table>'


def _legend() -> str:
    items = [("hsl(125, 45%, 62%)", "passed (darker = closer to the best score)"), ("hsl(0, 70%, 92%)", "failed"),
             ("#f5f5f5", "open idea (no solution yet)")]
    spans = "".join(f'<span><i class="sw" style="background:{c}"></i>{escape(t)}</span>' for c, t in items)
    spans += '<span><i class="sw" style="border:3px solid #f9a825"></i>path to the best candidate</span>'
    return f'<div class="legend">{spans}</div>'


def _spend(run: RunData) -> str:
    u = run.llm_usage()
    rows = [{"role": r["role"], "calls": str(r["calls"]), "retries": str(r["retries"]),
             "tokens in": f"{r['tokens_in']:,}", "tokens out": f"{r['tokens_out']:,}",
             "cost (USD)": f"{r['cost_usd']:.4f}", "errors": str(r["errors"])}
            for r in run.spend_by_role()]
    rows.append({"role": "total", "calls": str(int(u["calls"])),
                 "retries": str(sum(r["retries"] for r in run.spend_by_role())), "tokens in": f"{int(u['tokens_in']):,}",
                 "tokens out": f"{int(u['tokens_out']):,}", "cost (USD)": f"{u['cost_usd']:.4f}",
                 "errors": str(sum(r["errors"] for r in run.spend_by_role()))})
    cols = ["role", "calls", "retries", "tokens in", "tokens out", "cost (USD)", "errors"]
    if not run.calls and not u["calls"]:
        return '<p class="muted">No LLM calls (offline proposer).</p>' + _table(rows, cols, set(cols) - {"role"})
    # As claimed by the endpoint, call by call; what the caps counted (a claim past a call's bound at the bound,
    # a call lost to a kill at its bound) is the ledger's line.
    return (_table(rows, cols, set(cols) - {"role"})
            + f'<p class="muted">Counted against the caps: {escape(spend_text(run))}.</p>')


def _events(run: RunData) -> str:
    notable = run.notable_events()
    if not notable:
        return '<p class="muted">No backtracks, ideas judged too hard, rejected edits or policy errors.</p>'
    rows = [{"round": str(e.round), "event": e.kind.replace("_", " "),
             "details": json.dumps(e.data, default=str)[:300]} for e in notable[:500]]
    return _table(rows, ["round", "event", "details"], {"round"})


def _cycles(run: RunData) -> str:
    cycles = run.cycles()
    if not cycles:
        return '<p class="muted">No refinement cycles (a comparison strategy, or none was started).</p>'
    rows = []
    for c in cycles:
        edits = "".join(
            f'<li class="{"edit-applied" if e.applied else "edit-rejected"}"><b>{"applied" if e.applied else "rejected"}'
            f"</b> <span class=muted>({escape(e.when)})</span>: {escape(e.text)}</li>" for e in c.edits)
        ended = f"<b>{escape(c.reason_text)}</b>" + (f": {escape(c.why)}" if c.why else "")
        best = "-" if c.best_score is None else f"{c.best_score:.3f}"
        rows.append(f'<tr class="cycle-row"><td class="num">{c.n}</td><td class="num">{c.round}</td>'
                    f"<td><code>{escape(c.node_id)}</code> {escape(c.title)}</td><td class=\"num\">{c.attempts}</td>"
                    f'<td class="num">{best}</td><td>{escape(c.outcome)}</td><td>{ended}</td>'
                    f'<td>{f"<ul class=edits>{edits}</ul>" if edits else "<span class=muted>none</span>"}</td></tr>')
    head = "".join(f"<th>{h}</th>" for h in ("#", "round", "action", "attempts", "best", "outcome", "ended because",
                                             "world-model edits"))
    return f'<table class="data cycles"><thead><tr>{head}</tr></thead><tbody>{"".join(rows)}</tbody></table>'


def _evaluations(run: RunData) -> str:
    msgs = {e.id: (e.message or "").strip().splitlines() for e in run.evaluations}
    rows = []
    for a, e in zip(run.attempts, run.evaluations, strict=True):
        first = next((ln for ln in msgs[e.id] if ln.strip()), "")[:140]
        rows.append({"#": str(a.n), "round": str(a.round), "candidate": a.candidate_id, "action": a.action or "",
                     "status": a.status, "score": f"{a.score:.3f}", "best so far": f"{a.best_so_far:.3f}",
                     "message": first})
    cols = ["#", "round", "candidate", "action", "status", "score", "best so far", "message"]
    return _table(rows, cols, {"#", "round", "score", "best so far"})


def _profiles(run: RunData) -> str:
    """The counter table of the profiled candidates and the roofline position of the best candidates."""
    from ksearch.report.profiles import (
        COLUMNS,
        counters_note,
        profile_row,
        profiles_by_candidate,
        roofline_rows,
        roofline_title,
    )

    parts = []
    note = counters_note(run.backend)
    if note:
        parts.append(f'<p class="muted" id="no-counters">{escape(note.capitalize())}.</p>')
    items = profiles_by_candidate(run)
    if items:
        parts.append(_table([profile_row(c, r) for c, r in items], COLUMNS, set(COLUMNS) - {
            "candidate", "workload", "profile", "top stall"}, cls="data profiles"))
        notes = sorted({str(r["note"]) for _, r in items if r.get("note")})
        parts += [f'<p class="muted">{escape(n)}</p>' for n in notes]
    elif not note:
        parts.append('<p class="muted">No candidate was profiled (profile = "off", or none passed).</p>')
    roof = roofline_rows(run)
    if roof:
        parts.append(f"<h3>{escape(roofline_title(roof).capitalize())}</h3>"
                     + _table(roof, list(roof[0]), {"score", "flop/byte", "roofline"}, cls="data roofline"))
    return "\n".join(parts)


def render_html(run: RunData) -> str:
    facts = headline(run)
    cards = [f'<div class="card big"><div class="k">best score</div><div class="v">{run.best_score:.3f}</div></div>']
    cards += [f'<div class="card"><div class="k">{escape(k)}</div><div class="v">{escape(v)}</div></div>'
              for k, v in facts]
    actions = run.best_actions()
    path_html = ""
    if actions:
        steps = '<span class="arrow">→</span>'.join(f'<span class="step">{escape(a)}</span>' for a in actions)
        path_html = f'<div class="path"><b>path to the best:</b> {steps}</div>'
    best_path_ids = [str(n.get("node_id")) for n in run.best_path()]
    wm = run.world_model()
    snapshots = len(run.world_models)
    n_nodes = len(wm_nodes(wm)) if wm else 0
    chosen = run.chosen_candidate
    best_src = run.source(chosen)
    no_src = "No passing candidate." if chosen is None else "The candidate's source file is missing."
    kernel_title = "Best kernel" if chosen == run.best_candidate else "The run's pick"
    src_html, src_css = highlight_python(best_src) if best_src else (f'<p class="muted">{no_src}</p>', "")
    wl = workload_rows(run)
    wl_cols = ["workload", "split", "status", "latency", "baseline", "speedup", "roofline", "max abs err"]
    title = f"ksearch report: {run.task} on {run.backend}"
    generated = _dt.datetime.now(_dt.UTC).strftime("%Y-%m-%d %H:%M UTC")
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{escape(title)}</title>
<style>{CSS}{src_css}</style></head>
<body><main>
<h1>{escape(title)}</h1>
<div class="muted">run <code>{escape(run.run_id)}</code> · {escape(status_text(run))}</div>
<div class="cards">{"".join(cards)}</div>
{path_html}
<h2 id="trajectory">Score trajectory</h2>
<div class="chart" id="trajectory-chart">{trajectory_svg(run.attempts)}</div>
{_timeline(run)}<h2 id="world-model">World model</h2>
<p class="muted">Latest of {snapshots} snapshot{"s" if snapshots != 1 else ""}, {n_nodes} node{"s" if n_nodes != 1 else ""}.
</p>
{_legend()}
<div class="toolbar"><button id="expand-all" type="button">expand all notes</button>
<button id="collapse-all" type="button">collapse all</button></div>
{tree_html(wm, best_path_ids, run.best_score)}
<h2 id="cycles">Refinement cycles</h2>
<p class="muted">Why each cycle ended, and each world-model edit around it: applied, or rejected with the reason.</p>
{_cycles(run)}
<h2 id="workloads">{kernel_title} per workload</h2>
{_table(wl, wl_cols, {"latency", "baseline", "speedup", "roofline", "max abs err"}) if wl
 else '<p class="muted">No passing candidate.</p>'}
<h2 id="profiles">Hardware counters</h2>
{_profiles(run)}
<h2 id="source">{kernel_title}: <code>{escape(str(chosen or "-"))}</code></h2>
{src_html}
<h2 id="spend">Spend</h2>
<p>Budget used: {escape(budget_text(run))}</p>
{_spend(run)}
<h2 id="events">Search events</h2>
{_events(run)}
<h2 id="evaluations">Every evaluation</h2>
{_evaluations(run)}
<footer>Generated by ksearch {escape(__version__)} on {generated} from <code>{escape(str(run.path))}</code>.</footer>
</main>
<script>{JS}</script>
</body></html>
"""


def _timeline(run: RunData) -> str:
    """Evaluations per worker over time, for a run judged by several evaluators (nothing otherwise)."""
    svg = timeline_svg(run)
    return f'<h2 id="timeline">Evaluations per worker</h2>\n<div class="chart" id="timeline-chart">{svg}</div>\n' \
        if svg else ""


def write_html(run: RunData, out: Path) -> Path:
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".tmp")
    tmp.write_text(render_html(run), encoding="utf-8")
    tmp.replace(out)
    return out
