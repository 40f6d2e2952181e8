"""`ksearch report`, `compare`, `export`, `watch`: looking at runs. Parse, call one function, print."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape

from ksearch.cli.console import console, err, fail, say
from ksearch.cli.out_dir import check_out_dir, check_out_file, writing

RunArg = Annotated[str, typer.Argument(help="A run id under --runs-dir, or a path to a run directory.")]
RunsDir = Annotated[Path | None, typer.Option("--runs-dir", help="Where run ids are looked up "
                                              "(default: $KSEARCH_RUNS_DIR or runs/).")]


def _load(ref: str, runs_dir: Path | None):  # type: ignore[no-untyped-def]
    """The run's data; a missing or unreadable run is a UsageError (one line, exit 2)."""
    from ksearch.report.rundata import load_run
    from ksearch.store import resolve_run

    return load_run(resolve_run(ref, runs_dir))


def report_cmd(
    run: RunArg,
    html: Annotated[Path | None, typer.Option("--html", help="Also write a self-contained HTML report here.")] = None,
    tree: Annotated[bool, typer.Option(help="Show the world-model tree in the terminal.")] = True,
    evaluations: Annotated[bool, typer.Option("--evaluations", help="Instead of the summary, list every evaluation: "
                                              "index, kind, candidate, status, score, seconds.")] = False,
    calls: Annotated[bool, typer.Option("--calls", help="Instead of the summary, the LLM transcripts: every call's "
                                        "role, model, tokens, latency, retries, error, prompt and answer in full "
                                        "(paged on a terminal; keys redacted).")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="With --evaluations or --calls: print them as JSON.")] = False,
    runs_dir: RunsDir = None,
) -> None:
    """Summarise a run: best candidate, per-workload speedups, holdout, budget, spend, the path to the best."""
    from ksearch.report.evaluations import evaluations_json, evaluations_table
    from ksearch.report.summary import summary_renderable

    if as_json and not (evaluations or calls):
        fail("--json goes with --evaluations or --calls")
    if calls and (evaluations or html is not None):
        fail("--calls shows the transcripts alone: leave out --evaluations and --html")
    if calls:
        _show_calls(run, runs_dir, as_json)
        return
    data = _load(run, runs_dir)
    if html is not None:  # before anything is printed: a bad --html is the command's one line
        check_out_file(html, "--html", "report.html")
    if evaluations and as_json:
        typer.echo(evaluations_json(data))
    else:
        console.print(evaluations_table(data) if evaluations else summary_renderable(data, show_tree=tree))
    if html is not None:
        from ksearch.report.html import write_html

        with writing(html, "--html"):
            write_html(data, html)
        (err if as_json else console).print(f"HTML report: {html}")  # stdout stays one JSON document


def _show_calls(ref: str, runs_dir: Path | None, as_json: bool) -> None:
    from ksearch.report.calls import calls_json, calls_renderable, load_transcript
    from ksearch.store import resolve_run

    transcript = load_transcript(resolve_run(ref, runs_dir))
    if as_json:
        typer.echo(calls_json(transcript))
    elif console.is_terminal and transcript.calls:
        with console.pager(styles=True):  # $PAGER or less: transcripts run to thousands of lines
            console.print(calls_renderable(transcript), markup=False, highlight=False, soft_wrap=True)
    else:
        console.print(calls_renderable(transcript), markup=False, highlight=False, soft_wrap=True)


def compare_cmd(
    runs: Annotated[list[str], typer.Argument(help="Two or more run ids or run directories.")],
    out: Annotated[Path | None, typer.Option("--out", help="Write the chart (.png, .svg) or a page (.html).")] = None,
    runs_dir: RunsDir = None,
) -> None:
    """Compare runs: best-so-far curves, final scores, evaluations to reach 90% of the best."""
    from ksearch.report.compare import compare_table, lines_for, warnings_for, write_compare

    if len(runs) < 2:
        fail("compare needs at least two runs")
    if out is not None and out.suffix.lower() not in (".png", ".svg", ".html", ".htm"):
        fail(f"--out {out}: use a .png, .svg or .html file")
    lines = lines_for([_load(r, runs_dir) for r in runs])
    if out is not None:
        check_out_file(out, "--out", "compare.png")
    for w in warnings_for(lines):
        err.print(f"[yellow]warning:[/yellow] {escape(w)}")
    console.print(compare_table(lines, console))
    if out is not None:
        with writing(out, "--out"):
            write_compare(lines, out)
        say(f"written: {out}")


def export_cmd(
    run: RunArg,
    out: Annotated[Path | None, typer.Option("--out", help="Module file (default kernel.py) or, for "
                                             "flashinfer-trace, a folder (default RUN-ID-flashinfer-trace).")] = None,
    fmt: Annotated[str, typer.Option("--format", help="module | flashinfer-trace")] = "module",
    force: Annotated[bool, typer.Option(help="Overwrite an existing file or folder.")] = False,
    runs_dir: RunsDir = None,
) -> None:
    """Export the best candidate: a standalone module with its provenance, or FlashInfer-Trace JSON."""
    from ksearch.report.export import write_flashinfer_trace, write_module

    if fmt not in ("module", "flashinfer-trace"):
        fail(f"--format {fmt!r}: choose module or flashinfer-trace")
    data = _load(run, runs_dir)
    # An ExportError (nothing passed, the task does not load) is a UsageError: one line, exit 2.
    if fmt == "module":
        target = out or Path("kernel.py")
        check_out_file(target, "--out", "kernel.py")
        if target.exists() and not force:
            fail(f"{target} exists; pass --force to overwrite it")
        with writing(target, "--out"):
            write_module(data, target)
        _warn_unfinished(data)
        say(f"exported {data.chosen_candidate} of {data.run_id} to {target}")
        return
    folder = out or Path(f"{data.run_id}-flashinfer-trace")
    if folder.exists() and not folder.is_dir():
        fail(f"--out {folder} is a file; flashinfer-trace writes a folder")
    check_out_dir(folder)
    if any(folder.iterdir()) and not force:
        fail(f"{folder} is not empty; pass --force to write into it")
    with writing(folder, "--out"):
        written = write_flashinfer_trace(data, folder)
    _warn_unfinished(data)
    say(f"exported {data.chosen_candidate} of {data.run_id} as FlashInfer-Trace: {len(written)} files under {folder}")


def _warn_unfinished(data) -> None:  # type: ignore[no-untyped-def]
    from ksearch.report.export import unfinished_warning

    warning = unfinished_warning(data)
    if warning is not None:
        err.print(f"[yellow]warning:[/yellow] {escape(warning)}", highlight=False, soft_wrap=True)


def watch_cmd(
    run: RunArg,
    once: Annotated[bool, typer.Option("--once", help="Print one frame and exit.")] = False,
    interval: Annotated[float, typer.Option(help="Seconds between polls.")] = 1.0,
    runs_dir: RunsDir = None,
) -> None:
    """Follow a run started elsewhere until it stops: budget, best score, current action, last statuses."""
    from ksearch.report.watch import watch
    from ksearch.store import resolve_run

    if interval <= 0:
        fail("--interval must be positive (seconds)")
    try:
        final = watch(resolve_run(run, runs_dir), console, interval=interval, once=once)
    except KeyboardInterrupt:
        raise typer.Exit(130) from None
    if not once:
        say(f"run {final.run_id}: {final.status}")


def register(app: typer.Typer) -> None:
    app.command("report")(report_cmd)
    app.command("compare")(compare_cmd)
    app.command("export")(export_cmd)
    app.command("watch")(watch_cmd)
