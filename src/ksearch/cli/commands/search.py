"""`ksearch run` and `ksearch runs`."""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.markup import escape

from ksearch.cli.console import console, err, fail, say

if TYPE_CHECKING:
    from ksearch.search.run_end import Check

#: `ksearch run` exit codes besides 0 (the run finished, or paused by --stop-after) and 2 (bad input, one line).
EXIT_FAILED = 1  # the run failed: its proposer errored max_consecutive_errors times in a row
EXIT_INTERRUPTED = 130  # Ctrl-C
EXIT_TERMINATED = 143  # SIGTERM


def run_cmd(
    task: Annotated[str | None, typer.Argument(help="Built-in task name or task file (not with --resume; default "
                                                    "`task` in --config or $KSEARCH_TASK).")] = None,
    backend: Annotated[str | None, typer.Option(help="mlx-metal, mlx-cuda, mlx-cpu, mlx-metal-emu or auto.")] = None,
    policy: Annotated[str | None, typer.Option(help="offline (default, no network) or llm.")] = None,
    strategy: Annotated[str | None, typer.Option(help="ksearch (default), evolve or greedy.")] = None,
    budget: Annotated[int | None, typer.Option(help="Evaluations (default 120).")] = None,
    seed: Annotated[int | None, typer.Option(help="Run seed (selection ties, sampling).")] = None,
    config: Annotated[Path | None, typer.Option(help="Run configuration (TOML).")] = None,
    runs_dir: Annotated[str | None, typer.Option(help="Where runs live (default runs/ or $KSEARCH_RUNS_DIR).")] = None,
    baseline: Annotated[str | None, typer.Option(help="Baseline to score against.")] = None,
    timeout: Annotated[float | None, typer.Option(help="Per-candidate evaluation limit (s).")] = None,
    wall_time: Annotated[float | None, typer.Option(help="Stop after this many seconds of search.")] = None,
    from_cuda: Annotated[str | None, typer.Option(help="A CUDA kernel whose ideas to carry over.")] = None,
    resume: Annotated[str | None, typer.Option(help="Continue a run (id or path) exactly where it stopped.")] = None,
    preset: Annotated[str | None, typer.Option(help="LLM preset (openai, gemini, anthropic, vllm, ollama, ...).")] = None,
    model: Annotated[str | None, typer.Option(help="LLM model name.")] = None,
    base_url: Annotated[str | None, typer.Option(help="OpenAI-compatible endpoint.")] = None,
    api_key_env: Annotated[str | None, typer.Option(help="NAME of the env variable holding the key.")] = None,
    max_usd: Annotated[float | None, typer.Option(help="Stop when LLM spend reaches this.")] = None,
    replay: Annotated[str | None, typer.Option(help="Reproduce a finished LLM run from its recordings.")] = None,
    reevaluate: Annotated[bool, typer.Option(help="With --replay: measure again instead of replaying verdicts.")] = False,
    stop_after: Annotated[int | None, typer.Option(help="Pause after this many evaluations in total (resume later).")] = None,
    profile: Annotated[str | None, typer.Option(help="Hardware counters after verdicts (ncu on mlx-cuda): best (each "
                                                     "cycle's best, default), all (every pass) or off.")] = None,
    quiet: Annotated[bool, typer.Option(help="No live view.")] = False,
    workers: Annotated[int | None, typer.Option(help="Evaluators judging at once (default 1; more need Ray).")] = None,
    ray_address: Annotated[str | None, typer.Option(help="Evaluate on a running Ray cluster: auto or HOST:PORT.")] = None,
    confirm_top: Annotated[int | None, typer.Option(help="At the end, the best N timed again (default 3; 0: "
                                                         "not); the highest median is the run's result (best.py, "
                                                         "the holdout).")] = None,
    confirm_times: Annotated[int | None, typer.Option(help="Each of them this many times (default 2).")] = None,
) -> None:
    """Run K-Search (or a comparison strategy) on a task."""
    from ksearch.cli.live import LiveView, final_table
    from ksearch.config import load_config
    from ksearch.search.start import RAISABLE, Terminated, start_run

    flags = {"task": task, "backend": backend, "policy": policy, "strategy": strategy, "budget": budget, "seed": seed,
             "runs_dir": runs_dir, "baseline": baseline, "timeout_s": timeout, "wall_time_s": wall_time,
             "from_cuda": from_cuda, "workers": workers, "ray_address": ray_address, "profile": profile,
             "confirm_top": confirm_top, "confirm_times": confirm_times}
    llm = {"preset": preset, "model": model, "base_url": base_url, "api_key_env": api_key_env, "max_usd": max_usd}
    if reevaluate and replay is None:
        fail("--reevaluate goes with --replay RUN: it measures a replayed run's candidates again")
    if replay is not None and (workers is not None or ray_address is not None):
        fail("--workers and --ray-address do not go with --replay: a replay judges in this process, in the order its "
             "run recorded; leave them out")
    if replay is not None:
        # A replay runs with the recorded run's settings: a setting given beside it would be ignored without a word.
        given = _setting_flags(flags, llm, config, keep=("runs_dir", "workers", "ray_address"))
        given += ["--resume"] if resume is not None else []
        if given:
            fail(f"--replay reproduces a run with the settings it recorded: leave out {', '.join(given)} (only "
                 "--runs-dir, --reevaluate and --stop-after go with it)")
    if stop_after is not None and stop_after < 1:
        fail(f"--stop-after {stop_after}: pause after 1 or more evaluations in total; leave it out to run to the "
             "budget")
    raise_limits: dict[str, float | int | None] | None = None
    if resume is not None:
        # A run keeps the settings it started with; only its limits can be raised (silently ignoring a changed
        # --backend or --policy would run something other than what was asked).
        fixed = _setting_flags(flags, llm, config, keep=(*RAISABLE, "task", "runs_dir", "workers", "ray_address"))
        # A TASK given is most often the run's own: not a setting that cannot change but one to leave out.
        left_out = ", and TASK is left out (the run keeps its task)" if task is not None else ""
        if fixed:
            fail(f"--resume continues a run with the settings it started with: {', '.join(fixed)} cannot change "
                 f"(only --budget and --wall-time can be raised){left_out}; start a new run for other settings")
        if task is not None:
            fail("TASK is left out with --resume: the run keeps its task; start a new run for another task")
        raise_limits = {"budget": budget, "wall_time_s": wall_time}
    cfg = load_config(config, {**flags, "llm": {k: v for k, v in llm.items() if v is not None}},
                      need_task=resume is None and replay is None)
    # Configuration, resume and replay errors are UsageErrors: the app prints them as one line (exit 2).
    with LiveView(enabled=not quiet) as view:
        try:
            outcome = start_run(cfg, resume=resume, replay=replay, reevaluate=reevaluate, stop_after=stop_after,
                                raise_limits=raise_limits, on_event=view,
                                placement={"workers": workers, "ray_address": ray_address})
        except (KeyboardInterrupt, Terminated) as exc:
            if view.path is not None:
                how = "Ctrl-C" if isinstance(exc, KeyboardInterrupt) else "SIGTERM"
                say(f"run {view.path.name} stopped: interrupted ({how}); `{resume_command(view.path)}` continues it",
                    err)
            raise typer.Exit(EXIT_INTERRUPTED if isinstance(exc, KeyboardInterrupt) else EXIT_TERMINATED) from None
    console.print(final_table(outcome))
    if outcome.confirmation is not None:
        from ksearch.report.tables import confirmation_table

        console.print(confirmation_table(outcome.confirmation))
    line = f"run {outcome.path.name} {outcome.status}: {outcome.stop_reason}"
    if outcome.status == "stopped":  # paused: its reason says --resume continues it; this is the command that does
        line += f" (`{resume_command(outcome.path)}`)"
    if outcome.status == "failed":
        err.print(f"[red]{escape(line)}[/red]", highlight=False, soft_wrap=True)
        raise typer.Exit(EXIT_FAILED)
    console.print(escape(line), highlight=False, soft_wrap=True)


def _setting_flags(flags: dict[str, Any], llm: dict[str, Any], config: Path | None, keep: tuple[str, ...]) -> list[str]:
    """The run settings given on the command line, as flags (TASK as TASK), other than those in `keep`."""
    given = [("TASK" if k == "task" else f"--{k.removesuffix('_s').replace('_', '-')}") for k, v in flags.items()
             if v is not None and k not in keep]
    given += [f"--{k.replace('_', '-')}" for k, v in llm.items() if v is not None]
    return given + (["--config"] if config is not None else [])


def resume_command(path: Path) -> str:
    """The command that continues the run in `path`, as pasted in any folder: the run's directory, not its id (an
    id is looked up under the runs directory of where the command runs)."""
    return f"ksearch run --resume {shlex.quote(str(path.resolve()))}"


def runs_cmd(
    runs_dir: Annotated[str | None, typer.Option(help="Where runs live (default runs/ or $KSEARCH_RUNS_DIR).")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print exactly one JSON array: an object per run, the "
                                                         "table's figures with their candidates.")] = False,
) -> None:
    """List runs: task, backend, policy, budget used, the search's best, the pick of its best timed again and the
    run's result re-measured (each score with its candidate), status and why it ended, LLM retries."""
    import json

    from ksearch.report.tables import fitted_table, scored
    from ksearch.store import list_runs, runs_dir_problem
    from ksearch.store import runs_dir as runs_root

    problem = runs_dir_problem(runs_dir)
    if problem is not None:
        fail(problem)
    records = [_run_record(r) for r in list_runs(runs_dir)]
    if as_json:
        typer.echo(json.dumps(records, indent=1))
        return
    if not records:
        say(f"no runs yet under {runs_root(runs_dir)}: `ksearch run TASK` starts one")
        return
    cells = []
    for rec in records:
        if rec["status"] == "unreadable":  # listed, never left out: `ksearch report` on it fails with the reason
            known = {"run": rec["run"], "status": "unreadable", "reason": rec["reason"]}
            cells.append(tuple(escape(known.get(c, "-")) for c in RUNS_COLUMNS))
            continue
        best, pick, again = rec["search_best"], rec["pick"], rec["re_measured"]
        cells.append(tuple(escape(c) for c in (
            rec["run"], str(rec["task"]), str(rec["backend"]), str(rec["policy"]), str(rec["strategy"]),
            f"{rec['evaluations_done']}/{rec['budget']}", scored(best["candidate"], best["score"]),
            scored(pick["candidate"], pick["median"]) if pick else "-",
            scored(again["candidate"], again["score"]) if again else "-", rec["stage"],
            REASONS.get(str(rec["stop_kind"]), str(rec["stop_kind"] or "-")),
            "-" if rec["retries"] is None else str(rec["retries"]))))
    unreadable = sum(rec["status"] == "unreadable" for rec in records)
    title = f"runs ({len(records)}{f', {unreadable} unreadable' if unreadable else ''})"
    console.print(fitted_table(console, title, RUNS_COLUMNS, cells))


def _run_record(r: dict[str, Any]) -> dict[str, Any]:
    """One run of `ksearch runs`, for the table and for --json alike: each score with the candidate it belongs to."""
    from ksearch.harness.result import EvalResult
    from ksearch.search.confirm import confirmations
    from ksearch.search.run_end import shown_stage

    if "unreadable" in r:
        return {"run": r["id"], "path": r["path"], "status": "unreadable", "reason": r["unreadable"]}
    usage = r.get("llm_usage") or {}
    # the result's search workloads timed again in its holdout evaluation (the best score leans high); the result
    # is the pick where the run's best few were timed again, else the search's best
    again = EvalResult.from_json(r["holdout"]).search_score_again() if r.get("holdout") else None
    result = r.get("chosen_candidate") or r.get("best_candidate")
    # the confirmation that chose the run's result (its end's, or an adopted `ksearch confirm`'s): the pick and its
    # median; a later `ksearch confirm` not adopted is `ksearch report`'s to show
    confirmed = confirmations(Path(r["path"]), r)[0] or {}
    return {
        "run": r["id"], "path": r["path"], "task": r.get("task"), "backend": r.get("backend"),
        "policy": r.get("policy"), "strategy": r.get("strategy"), "evaluations_done": r.get("evaluations_done") or 0,
        "budget": r.get("budget"),
        "search_best": {"candidate": r.get("best_candidate"), "score": float(r.get("best_score") or 0)},
        "pick": {"candidate": confirmed["pick"], "median": float(confirmed.get("pick_median") or 0.0)}
        if confirmed.get("pick") else None,
        "re_measured": {"candidate": result, "score": again} if again is not None else None,
        "status": r.get("status"), "stage": shown_stage(str(r.get("status")), r), "stop_kind": r.get("stop_kind"),
        "retries": usage.get("retries") if r.get("policy") == "llm" else None,
    }


def confirm_cmd(
    run: Annotated[str, typer.Argument(help="A run id under --runs-dir, or a path to a run directory.")],
    top: Annotated[int | None, typer.Option(help="How many of the run's best candidates, by search score (default: "
                                                 "the run's own confirm_top; 3 where its end timed none).")] = None,
    times: Annotated[int | None, typer.Option(help="Evaluations of each, in turns (default: the run's own "
                                                   "confirm_times; 2).")] = None,
    runs_dir: Annotated[str | None, typer.Option(help="Where runs live (default runs/ or $KSEARCH_RUNS_DIR).")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print exactly one JSON object.")] = False,
    adopt: Annotated[bool, typer.Option("--adopt", help="Take the pick as the run's result: best.py, its holdout "
                                                        "judged again, confirm.json.")] = False,
    workers: Annotated[int | None, typer.Option(help="Time them on a Ray pool of N evaluators (one of them judges, "
                                                     "against the run's recorded baseline).")] = None,
    ray_address: Annotated[str | None, typer.Option(help="The pool on a running Ray cluster (auto or HOST:PORT): "
                                                         "for a run a cluster judged.")] = None,
) -> None:
    """Time an ended run's best candidates again, in turns, each in a fresh process; the pick is the highest median.

    A search's best is the highest of single measurements and leans high. The run may be finished, stopped or
    interrupted; each verdict is a `confirm` evaluation of the run. Writes confirm-later.json in the run's directory,
    beside the confirmation that chose the run's result (confirm.json), which stays; with --adopt the pick becomes
    the run's result, as at a run's end, and this confirmation the run's (confirm.json)."""
    import json

    from ksearch.search.judge import Judge, run_judge
    from ksearch.search.run_end import check_again
    from ksearch.store import resolve_run

    path = resolve_run(run, runs_dir)
    if (top is not None and top < 1) or (times is not None and times < 1):
        fail("--top and --times take 1 or more")
    if workers is not None and workers < 1:
        fail("--workers takes 1 or more")

    def progress(item, result):  # type: ignore[no-untyped-def]
        if not as_json:
            say(f"{item.candidate}: {result.status} {result.score:.3f}x", err)

    if (workers or 1) > 1 or ray_address is not None:
        from ksearch.search.pool_judge import PoolJudge

        judge: Judge | PoolJudge = PoolJudge(path, workers or 1, ray_address)
    else:
        judge = run_judge(path)
    try:
        held = judge.holdout if adopt and judge.has_holdout() else None
        check = check_again(path, top, times, judge, held, adopt, on_result=progress)
    finally:
        judge.close()
    out = check.confirmation
    if as_json:
        adopted = {"candidate": check.result, "holdout": check.holdout.to_json() if check.holdout else None} \
            if check.adopted else None
        typer.echo(json.dumps({**out.to_json(), "written": str(check.written),
                               **({"adopted": adopted} if adopt else {})}))
        return
    from ksearch.report.tables import confirmation_table

    console.print(confirmation_table(out))
    say(f"written: {check.written}")
    console.print(_kept_line(check), highlight=False, soft_wrap=True)


def _kept_line(check: Check) -> str:
    """What became of the run's result: the pick adopted, or the result left as it was."""
    pick = check.confirmation.pick
    if check.adopted:
        hold = check.holdout
        judged = f"holdout {hold.holdout_score or 0:.3f}x ({hold.status})" if hold else "no holdout workloads"
        return f"adopted {check.result} as the run's result (best.py; {judged})"
    if pick is None:
        return f"nothing to adopt: no candidate passed every evaluation again; the run's result stays {check.result}"
    if pick.candidate == check.result:
        return f"the pick is the run's result, {check.result}"
    return (f"not adopted: the run's result stays {check.result}; `--adopt` takes the pick ({pick.candidate}) as "
            "the run's result")


#: `ksearch runs`' columns. Each score names its candidate: the search's best and the pick (which the holdout
#: re-measures) may differ.
RUNS_COLUMNS = ("run", "task", "backend", "policy", "strategy", "budget used", "search best", "pick (median)",
                "re-measured", "status", "reason", "retries")

#: `ksearch runs`' reason column: the end's kind in a few words (the report gives the whole line).
REASONS = {"budget": "budget", "wall_time": "wall time", "usd_cap": "USD cap", "token_cap": "token cap",
           "endpoint_failure": "endpoint failure", "proposer_failure": "proposer errors",
           "exhausted": "nothing new", "paused": "paused", "interrupted": "interrupted", "error": "error"}


def register(app: typer.Typer) -> None:
    app.command("run")(run_cmd)
    app.command("runs")(runs_cmd)
    app.command("confirm")(confirm_cmd)
