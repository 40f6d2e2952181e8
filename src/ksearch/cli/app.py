"""The `ksearch` command line: parse, call one function, print. No logic lives here.

The commands of each room live in ksearch/cli/commands/<room>.py, each with register(app); bad input anywhere below
becomes one line and exit 2 in _App.invoke.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from typer.core import TyperGroup

from ksearch import __version__
from ksearch.cli.commands import bench, knowledge, llm, report, search
from ksearch.cli.console import console, err, fail, print_error, say
from ksearch.errors import UsageError

if TYPE_CHECKING:
    from ksearch.harness.result import EvalResult


class _App(TyperGroup):
    """The root command group. A UsageError raised by any command below it (or by the core it calls) is printed
    here as `error: <first line>` with exit code 2: the one place that does, whether the app runs from `main` or
    from a test's CliRunner."""

    def invoke(self, ctx: Any) -> Any:
        try:
            return super().invoke(ctx)
        except UsageError as exc:
            lines = str(exc).splitlines()
            print_error(lines[0] if lines else type(exc).__name__)
            raise typer.Exit(2) from None


# "markdown": a description is reflowed as a paragraph; typer's "rich" mode kept the docstrings' line breaks in the
# list of commands, a line ending mid-sentence with its rest below a gap (tests/test_cli_help.py).
app = typer.Typer(cls=_App, add_completion=False, no_args_is_help=True, rich_markup_mode="markdown",
                  help="ksearch: K-Search for fast MLX kernels.")


@app.callback(invoke_without_command=True)
def _root(version: Annotated[bool, typer.Option("--version", help="Print the version.")] = False) -> None:
    if version:
        console.print(__version__)
        raise typer.Exit(0)


@app.command("tasks")
def tasks_cmd(as_json: Annotated[bool, typer.Option("--json", help="Print exactly one JSON array: one object per "
                                                    "task (name, kind, inputs, outputs, workloads, forbidden, "
                                                    "baselines, default_baseline).")] = False) -> None:
    """List the built-in tasks with their workloads and baselines."""
    from ksearch.report.tables import tasks_table
    from ksearch.tasks import all_tasks

    tasks = all_tasks()
    if as_json:
        print(json.dumps([t.summary() for t in tasks], indent=2))
        return
    console.print(tasks_table(tasks, console))


@app.command("backends")
def backends_cmd(as_json: Annotated[bool, typer.Option("--json", help="Print exactly one JSON array: one object per "
                                                       "backend here (backend, environment, profile); [] without "
                                                       "MLX.")] = False) -> None:
    """List the MLX backends on this machine with their hardware profiles."""
    from ksearch.backends import available_backends, environment
    from ksearch.report.tables import backends_table

    found = available_backends()
    rows = [{"backend": b.name, "environment": environment(b), "profile": b.profile()} for b in found]
    if as_json:
        print(json.dumps(rows, indent=2, default=str))
        return
    if not found:
        fail("MLX is not installed here: pip install 'kernelsearch[cpu]' (Linux) or 'kernelsearch' (macOS)")
    console.print(backends_table(rows, console))


@app.command("eval")
def eval_cmd(
    task: Annotated[str, typer.Argument(help="Built-in task name or a task file (.py exporting TASK).")],
    candidate: Annotated[Path, typer.Argument(help="Candidate source file defining run(**inputs).")],
    backend: Annotated[str | None, typer.Option(help="mlx-metal, mlx-cuda, mlx-cpu, mlx-metal-emu or auto.")] = None,
    baseline: Annotated[str | None, typer.Option(help="Baseline to score against (naive, native, community).")] = None,
    workloads: Annotated[str | None, typer.Option(help="Comma-separated workload names.")] = None,
    holdout: Annotated[bool, typer.Option(help="Also evaluate the holdout workloads.")] = False,
    timeout: Annotated[float | None, typer.Option(help="Wall-clock limit (s) for the whole evaluation.")] = None,
    memory_limit_gb: Annotated[float, typer.Option(help="Kill the worker above this resident memory.")] = 16.0,
    seed: Annotated[int | None, typer.Option(help="Master seed to reproduce a verdict.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print exactly one JSON object.")] = False,
    profile: Annotated[bool, typer.Option(help="After the verdict, profile a passed candidate at one search workload: "
                                               "ncu's counters on mlx-cuda, the compiler's resources, the roofline "
                                               "fraction.")] = False,
) -> None:
    """Judge one candidate: correctness on secret seeds, then speed against a baseline.

    Exit status: 0 when the candidate passed, 1 when it did not (any other verdict), 2 for bad input."""
    from ksearch.backends import get_backend
    from ksearch.files import read_text
    from ksearch.harness import EvalOptions, evaluate
    from ksearch.tasks import get_task

    t = get_task(task)
    source = read_text(candidate, "candidate file")
    b = get_backend(backend)
    if baseline is not None and baseline not in t.baselines:
        fail(f"task {t.name} has no baseline {baseline!r}; choose one of {', '.join(t.baselines)}")
    names = [n.strip() for n in workloads.split(",") if n.strip()] if workloads else None
    if names:
        known = {w.name for w in t.workloads}
        unknown = [n for n in names if n not in known]
        if unknown:
            fail(f"task {t.name} has no workload {unknown[0]!r}; see `ksearch tasks`")
    if timeout is not None and timeout <= 0:
        fail("--timeout must be positive (seconds)")
    if memory_limit_gb <= 0:
        fail("--memory-limit-gb must be positive (GiB)")
    opts = EvalOptions(baseline=baseline, workloads=names, holdout=holdout, timeout_s=timeout,
                       memory_limit_bytes=int(memory_limit_gb * (1 << 30)), seed=seed)
    result = evaluate(t, source, b, opts)
    report = None
    if profile and result.passed:
        from ksearch.harness.profile import profile_candidate

        # A process of its own, after the verdict: nothing it sees changes the verdict.
        report = profile_candidate(t, b, source, result, workload=names[0] if names else None,
                                   memory_limit_bytes=opts.memory_limit_bytes).to_json()
    if as_json:
        out = {**result.to_json(), "score": result.search_score()}
        if profile:
            out["profile"] = report
        sys.stdout.write(json.dumps(out, default=str) + "\n")
    else:
        _show_eval(result, profile, report)
    # A script tells a failed candidate from a passed one by the exit status alone, as with `lint` and `run`.
    raise typer.Exit(0 if result.passed else 1)


def _show_eval(result: EvalResult, profile: bool, report: dict[str, Any] | None) -> None:
    """`ksearch eval`'s verdict for a terminal, with the profile where one was asked for."""
    from ksearch.report.tables import eval_table

    console.print(eval_table(result))
    if profile and report is None:
        say(f"profile: not profiled, the verdict is {result.status}", err)
    elif report is not None:
        from ksearch.report.profiles import profile_table

        if report.get("status") != "counters" and report.get("note"):
            say(f"profile: {report['note']}", err)
        console.print(profile_table([(None, report)]))


@app.command("demo")
def demo_cmd(
    budget: Annotated[int, typer.Option(help="Evaluations for the search (30: about two minutes on 2 CPU cores; "
                                             "a search that has tried every template ends sooner).")] = 30,
    backend: Annotated[str | None, typer.Option(help="Backend (default: the best here).")] = None,
    runs_dir: Annotated[str | None, typer.Option(help="Where the run is written (default runs/ or "
                                                      "$KSEARCH_RUNS_DIR).")] = None,
    quiet: Annotated[bool, typer.Option(help="No live view.")] = False,
) -> None:
    """The main job on the embedded default: the best local backend, the offline proposer, no network."""
    from ksearch.backends import get_backend
    from ksearch.cli.demo import run_demo

    if budget < 1:
        fail("--budget must be at least 1")
    run_demo(get_backend(backend), budget, console, runs_dir=runs_dir, quiet=quiet)


for _commands in (search, knowledge, llm, report, bench):
    _commands.register(app)


def _click_exceptions():  # type: ignore[no-untyped-def]
    """Typer >= 0.20 vendors click; older ones use click itself."""
    try:
        from typer._click import exceptions
    except ImportError:
        from click import exceptions  # type: ignore[no-redef]
    return exceptions


def main() -> None:
    click = _click_exceptions()
    try:
        code = app(standalone_mode=False)
    except getattr(click, "NoArgsIsHelpError", ()) as exc:  # bare `ksearch`: the help, not an error
        console.print(exc.ctx.get_help() if exc.ctx is not None else "ksearch --help")
        sys.exit(0)
    except click.UsageError as exc:
        # One line that says what to do, instead of click's boxed usage text.
        hint = f" (see `{exc.ctx.command_path} --help`)" if exc.ctx is not None else ""
        print_error(f"{exc.format_message()}{hint}")
        sys.exit(2)
    except click.ClickException as exc:
        print_error(exc.format_message())
        sys.exit(exc.exit_code)
    except KeyboardInterrupt:
        sys.exit(130)
    sys.exit(code if isinstance(code, int) else 0)
