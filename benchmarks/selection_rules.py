"""The frontier selection rules, measured with the offline proposer: the weighted priority V (the default,
exploration weight 0.5), the same with a lower exploration weight, and the published K-Search ordering (difficulty
cut-off, then score, difficulty, rating). Per task and seed, one run per rule, one run at a time: the evaluations it
took to reach 95% of its own final best, and that final best.

    python benchmarks/selection_rules.py [--tasks selective_scan softmax gqa_decode] [--seeds 1 2 3 4 5]
                                         [--budget 40] [--rules weighted weighted-explore-0.2 published]
                                         [--backend mlx-cpu] [--share-verdicts VERDICTS.jsonl]
                                         [--out benchmarks/results] [--resume RESULT.json]
                                         [--runs-dir DIR] [--rebuild RUNS_DIR...]
    python benchmarks/selection_rules.py --merge PART.json PART.json ... [--out DIR]

`--share-verdicts FILE`: one evaluator judges every run, and a candidate whose source an earlier run (of any rule,
in this process or one before it that wrote FILE) had judged gets that verdict again instead of a new measurement.
The rules then differ only in the order they try candidates, never in the noise of a new measurement, and a GPU
pays once per distinct candidate (the rules' runs render largely the same template space). FILE grows by a line
per new verdict, so a comparison split over several calls keeps them (`--resume` with the result written so far).
`--merge` joins results of one machine measured task by task (the GPU suite's `selection-rules TASK`) into one, on any
machine: the machine's facts come from the parts.

Writes `selection-rules-cpu-mlx-cpu-<device>.json` on the CPU, `selection-rules-gpu-BACKEND-<device>.json`
elsewhere (schema ksearch-bench/1). Fewer seeds or tasks or a smaller budget than the full comparison (on the CPU the
defaults; on a GPU gqa_decode and attention, seed 1, budget 60: GPU_FULL) mark the result `reduced` in its summary
and notes.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from ksearch.backends import get_backend
from ksearch.bench.results import make_result, merged_parts, write_result
from ksearch.config import RunConfig, SelectionWeights
from ksearch.harness import EvalOptions, EvalResult, Evaluator
from ksearch.search.start import create_run, execute, start_run
from ksearch.store import read_run
from ksearch.tasks import get_task

RULES: dict[str, SelectionWeights] = {
    "weighted": SelectionWeights(),
    "weighted-explore-0.2": SelectionWeights(exploration=0.2),
    "published": SelectionWeights(rule="published"),
}
TASKS = ("selective_scan", "softmax", "gqa_decode")
SEEDS = (1, 2, 3, 4, 5)
BUDGET = 40
#: The full comparison on a GPU: (tasks, seeds, budget). A GPU evaluation costs seconds, not a fraction of one.
GPU_FULL = (("gqa_decode", "attention"), (1,), 60)
TIE = 0.03  # final bests within 3% are a tie: separate-process timings on a shared 2-core machine move that much


class SharedVerdicts:
    """An evaluate function for every run of the comparison: one Evaluator per task, and each distinct source judged
    once, its verdict kept in `path` (one JSON line per source) for later calls."""

    def __init__(self, backend: str, path: Path) -> None:
        self.backend, self.path = get_backend(backend), path
        self.verdicts: dict[tuple[str, str], dict[str, Any]] = {}
        if path.is_file():
            for line in path.read_text().splitlines():
                if line.strip():
                    row = json.loads(line)
                    self.verdicts[(row["task"], row["source_sha256"])] = row["result"]
        self.evaluators: dict[str, Evaluator] = {}
        self.task = ""
        self.judged = self.reused = 0

    def __call__(self, source: str) -> EvalResult:
        key = (self.task, hashlib.sha256(source.encode()).hexdigest())
        if key in self.verdicts:
            self.reused += 1
            return EvalResult.from_json(self.verdicts[key])
        if self.task not in self.evaluators:
            self.evaluators[self.task] = Evaluator(get_task(self.task), self.backend, spare=True)
        result = self.evaluators[self.task].evaluate(source, EvalOptions())
        self.judged += 1
        self.verdicts[key] = result.to_json()
        with self.path.open("a") as f:
            f.write(json.dumps({"task": key[0], "source_sha256": key[1], "result": self.verdicts[key]}) + "\n")
        return result

    def close(self) -> None:
        for ev in self.evaluators.values():
            ev.close()


def one_run(task: str, seed: int, rule: str, budget: int, runs_dir: Path, backend: str = "mlx-cpu",
            shared: SharedVerdicts | None = None) -> dict[str, Any]:
    cfg = RunConfig(task=task, backend=backend, budget=budget, seed=seed, runs_dir=str(runs_dir),
                    weights=RULES[rule], profile="off" if shared is not None else RunConfig().profile)
    t0 = time.monotonic()
    if shared is None:
        path = start_run(cfg).path
    else:
        shared.task = task
        store, _, _ = create_run(cfg)
        try:
            path = execute(store, cfg, evaluate=shared).path
        finally:
            store.close()
    return row_from_run(path, rule, time.monotonic() - t0)


def rule_of(weights: dict[str, Any]) -> str | None:
    """The name in RULES of a run's stored [weights]."""
    return next((name for name, w in RULES.items() if w.__dict__ == {**SelectionWeights().__dict__, **weights}), None)


def config_key(params: dict[str, Any]) -> str:
    """A candidate's template configuration: the same key in every run that renders it."""
    return ",".join(f"{k}={params[k]}" for k in sorted(params))


def row_from_run(path: Path, rule: str, wall_s: float | None = None) -> dict[str, Any]:
    recs = read_run(path)
    config = recs.meta.get("config") or {}
    params = {c.id: c.params for c in recs.candidates}
    evals = recs.evaluations_of("search")
    scores = [e.score if e.status == "passed" else 0.0 for e in evals]
    best, best_so_far = 0.0, []
    for s in scores:
        best = max(best, s)
        best_so_far.append(round(best, 4))
    final = best_so_far[-1] if best_so_far else 0.0
    to95 = next((i + 1 for i, b in enumerate(best_so_far) if b >= 0.95 * final), None) if final > 0 else None
    reasons: dict[str, int] = {}
    for e in recs.events:
        if e.kind == "cycle_end":
            key = str(e.data.get("reason") or "?")
            reasons[key] = reasons.get(key, 0) + 1
    holdout = recs.meta.holdout or {}
    return {"task": recs.meta.task, "seed": int(config.get("seed", 0)), "rule": rule,
            "budget": int(config.get("budget", 0)), "evaluations": len(scores), "final_best": final,
            "start_score": scores[0] if scores else None, "evaluations_to_95pct": to95, "best_so_far": best_so_far,
            "configs": [config_key(params.get(e.candidate_id) or {}) for e in evals],
            "scores": [round(s, 4) for s in scores], "cycles": sum(reasons.values()),
            "cycle_end_reasons": reasons, "stop_kind": recs.meta.get("stop_kind"),
            "holdout_score": holdout.get("holdout_score", holdout.get("score")),
            "wall_s": None if wall_s is None else round(wall_s, 1), "run": path.name}


def rebuild(dirs: list[str]) -> list[dict[str, Any]]:
    """The rows of every finished run in `dirs` (the last run of a task, seed and rule counts)."""
    rows: dict[tuple[Any, ...], dict[str, Any]] = {}
    for d in dirs:
        for run in sorted(Path(d).iterdir()):
            if not (run / "run.db").is_file():
                continue
            recs = read_run(run)
            rule = rule_of((recs.meta.get("config") or {}).get("weights") or {})
            if recs.meta.status != "finished" or rule is None:
                continue
            row = row_from_run(run, rule)
            rows[(row["task"], row["seed"], row["rule"])] = row
    return list(rows.values())


def denoise(rows: list[dict[str, Any]]) -> None:
    """Every run of a task renders configurations of the same template space, measured with noise (a loaded 2-core
    machine moves one kernel's score by tens of percent from run to run). Give each configuration its median score
    over every run of the task, then add to each row what it reached on those scores: `denoised_final_best` and
    `denoised_evaluations_to_95pct` (of the best median score of the task's whole space)."""
    for task in {r["task"] for r in rows}:
        task_rows = [r for r in rows if r["task"] == task and r.get("configs")]
        measured: dict[str, list[float]] = {}
        for r in task_rows:
            for key, score in zip(r["configs"], r["scores"], strict=True):
                measured.setdefault(key, []).append(score)
        median = {k: statistics.median(v) for k, v in measured.items()}
        top = max(median.values(), default=0.0)
        for r in task_rows:
            curve, best = [], 0.0
            for key in r["configs"]:
                best = max(best, median[key])
                curve.append(best)
            r["denoised_final_best"] = round(best, 4)
            r["denoised_evaluations_to_95pct"] = next((i + 1 for i, b in enumerate(curve) if b >= 0.95 * top), None)
            r["denoised_task_best"] = round(top, 4)


def summarise(rows: list[dict[str, Any]], rules: list[str]) -> dict[str, Any]:
    """Per rule: mean evaluations to 95% and mean final best per task; against the weighted rule, paired by task and
    seed: the geometric mean of the final-best ratio, and wins / ties / losses (a tie within TIE)."""
    out: dict[str, Any] = {}
    by = {(r["task"], r["seed"], r["rule"]): r for r in rows}
    for rule in rules:
        mine = [r for r in rows if r["rule"] == rule]
        tasks = sorted({r["task"] for r in mine})
        entry: dict[str, Any] = {"per_task": {}}
        for task in tasks:
            rs = [r for r in mine if r["task"] == task]
            reached = [r["evaluations_to_95pct"] for r in rs if r["evaluations_to_95pct"] is not None]
            dn = [r["denoised_evaluations_to_95pct"] for r in rs if r.get("denoised_evaluations_to_95pct")]
            entry["per_task"][task] = {
                "runs": len(rs),
                "mean_denoised_evaluations_to_95pct": round(statistics.fmean(dn), 2) if dn else None,
                "runs_reaching_95pct_denoised": len(dn),
                "mean_evaluations_to_95pct": round(statistics.fmean(reached), 2) if reached else None,
                "median_evaluations_to_95pct": statistics.median(reached) if reached else None,
                "mean_final_best": round(statistics.fmean(r["final_best"] for r in rs), 4),
                "min_final_best": round(min(r["final_best"] for r in rs), 4),
            }
        if rule != "weighted":
            pairs = [(r, w) for r in mine if (w := by.get((r["task"], r["seed"], "weighted"))) is not None
                     and w["final_best"] > 0 and r["final_best"] > 0]
            if pairs:
                ratios = [r["final_best"] / w["final_best"] for r, w in pairs]
                entry["vs_weighted"] = {
                    "pairs": len(pairs),
                    "geomean_final_best_ratio": round(math.exp(statistics.fmean(math.log(x) for x in ratios)), 4),
                    "wins": sum(1 for x in ratios if x > 1 + TIE), "ties": sum(1 for x in ratios if abs(x - 1) <= TIE),
                    "losses": sum(1 for x in ratios if x < 1 - TIE),
                    "mean_denoised_evaluations_to_95pct_difference": _mean_diff(pairs, "denoised_evaluations_to_95pct"),
                    "mean_evaluations_to_95pct_difference": round(statistics.fmean(
                        r["evaluations_to_95pct"] - w["evaluations_to_95pct"] for r, w in pairs
                        if r["evaluations_to_95pct"] is not None and w["evaluations_to_95pct"] is not None), 2),
                }
        out[rule] = entry
    return out


def _mean_diff(pairs: list[tuple[dict[str, Any], dict[str, Any]]], key: str) -> float | None:
    diffs = [r[key] - w[key] for r, w in pairs if r.get(key) is not None and w.get(key) is not None]
    return round(statistics.fmean(diffs), 2) if diffs else None


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tasks", nargs="+", default=list(TASKS))
    ap.add_argument("--seeds", nargs="+", type=int, default=list(SEEDS))
    ap.add_argument("--budget", type=int, default=BUDGET)
    ap.add_argument("--rules", nargs="+", default=list(RULES), choices=list(RULES))
    ap.add_argument("--backend", default="mlx-cpu")
    ap.add_argument("--share-verdicts", default=None, metavar="VERDICTS.jsonl",
                    help="judge each distinct candidate once for all runs, keeping the verdicts in this file")
    ap.add_argument("--out", default="benchmarks/results")
    ap.add_argument("--runs-dir", default=None, help="keep the runs here (default: a temporary directory)")
    ap.add_argument("--resume", default=None, metavar="RESULT.json",
                    help="continue a comparison cut short: keep that file's runs and do only the missing ones")
    ap.add_argument("--merge", nargs="+", default=None, metavar="PART.json",
                    help="run nothing: join results of one machine measured task by task")
    ap.add_argument("--rebuild", nargs="+", default=None, metavar="RUNS_DIR",
                    help="run nothing: build the result from the finished runs kept in these --runs-dir folders")
    args = ap.parse_args()
    rows: list[dict[str, Any]] = []
    if args.merge:
        print(merge([json.loads(Path(f).read_text()) for f in args.merge], args))
        return
    if args.rebuild:
        rows = [r for r in rebuild(args.rebuild) if r["budget"] == args.budget and r["rule"] in args.rules
                and r["task"] in args.tasks and r["seed"] in args.seeds]
        planned = [(seed, task, rule) for seed in args.seeds for task in args.tasks for rule in args.rules]
        print(write(rows, args, all(p in {(r["seed"], r["task"], r["rule"]) for r in rows} for p in planned)))
        return
    if args.resume:
        old = json.loads(Path(args.resume).read_text())
        rows = [r for r in old["figures"] if r["budget"] == args.budget and r["rule"] in args.rules]
    done = {(r["seed"], r["task"], r["rule"]) for r in rows}
    planned = [(seed, task, rule) for seed in args.seeds for task in args.tasks for rule in args.rules]
    todo = [p for p in planned if p not in done]
    with tempfile.TemporaryDirectory(prefix="ksearch-selection-") as tmp:
        runs = Path(args.runs_dir or tmp)
        # Seeds outermost, and the result written after every run: a comparison cut short still holds whole seeds.
        path = None
        shared = SharedVerdicts(args.backend, Path(args.share_verdicts)) if args.share_verdicts else None
        for seed, task, rule in todo:
            try:
                row = one_run(task, seed, rule, args.budget, runs, args.backend, shared)
            except BaseException:
                if shared is not None:
                    shared.close()
                raise
            rows.append(row)
            print(f"{task:15s} seed {seed} {rule:22s} final {row['final_best']:.3f} "
                  f"to95 {row['evaluations_to_95pct']} evals {row['evaluations']} "
                  f"cycles {row['cycles']} {row['cycle_end_reasons']} {row['wall_s']} s", flush=True)
            if shared is not None:
                row["verdicts_judged_so_far"], row["verdicts_reused_so_far"] = shared.judged, shared.reused
            path = write(rows, args, all(p in {(r["seed"], r["task"], r["rule"]) for r in rows} for p in planned))
        if shared is not None:
            shared.close()
    print(path or "nothing left to run")


def merge(parts: list[dict[str, Any]], args: argparse.Namespace) -> Path:
    """One result from parts of one machine: their runs, summarised as if measured in one call."""
    frame = merged_parts(parts, "selection_rules")
    rows = frame["figures"]
    budgets = {r["budget"] for r in rows}
    if len(budgets) != 1:
        raise SystemExit(f"selection_rules: the parts ran different budgets {sorted(budgets)}: merge runs of one budget")
    args.backend, args.budget = frame["backend"], budgets.pop()
    args.tasks = list(dict.fromkeys(r["task"] for r in rows))
    args.rules = [k for k in RULES if any(r["rule"] == k for r in rows)]
    args.share_verdicts = args.share_verdicts or any("Verdicts shared" in p.get("notes", "") for p in parts)
    complete = all(p["summary"].get("complete") for p in parts)
    summary, notes = summarised(rows, args, complete)
    tier = frame["name"].rsplit("-", 1)[-1]
    shapes = [s for p in parts for s in p.get("shapes", [])]
    return write_result({**frame, "figures": rows, "shapes": shapes, "summary": summary, "notes": notes,
                         "name": f"selection-rules-{tier}"}, args.out)


def write(rows: list[dict[str, Any]], args: argparse.Namespace, complete: bool) -> Path:
    summary, notes = summarised(rows, args, complete)
    backend = get_backend(args.backend)
    tier = "cpu" if args.backend == "mlx-cpu" else "gpu"
    tasks = summary["tasks"]
    result = make_result(f"selection-rules-{tier}", backend, rows,
                         [f"{t} {backend.tier} search workloads" for t in tasks], ["float32", "float16"], summary, notes)
    return write_result(result, args.out)


def summarised(rows: list[dict[str, Any]], args: argparse.Namespace, complete: bool) -> tuple[dict[str, Any], str]:
    """The summary and notes of a comparison's rows (sorted and denoised in place)."""
    seeds = sorted({r["seed"] for r in rows})
    tasks = [t for t in args.tasks if any(r["task"] == t for r in rows)]
    full_tasks, full_seeds, full_budget = (TASKS, SEEDS, BUDGET) if args.backend == "mlx-cpu" else GPU_FULL
    reduced = (len(seeds) < len(full_seeds) or args.budget < full_budget or set(tasks) != set(full_tasks)
               or not complete)
    order = [*full_tasks, *TASKS]
    rows.sort(key=lambda r: (r["seed"], order.index(r["task"]) if r["task"] in order else 9, r["rule"]))
    denoise(rows)
    summary = {"reduced": reduced, "complete": complete, "rules": {k: RULES[k].__dict__ for k in args.rules},
               "tasks": tasks, "seeds": seeds, "budget": args.budget, **summarise(rows, args.rules)}
    where = "a shared 2-core CPU" if args.backend == "mlx-cpu" else "one device"
    notes = (f"Offline proposer, {args.backend}, budget {args.budget}, seeds {seeds}, tasks {tasks}; one run at a time on "
             f"{where}. " + ("Verdicts shared: each distinct candidate judged once for every run (--share-verdicts). "
                            if args.share_verdicts else "") + "evaluations_to_95pct: the evaluation (1 = the starting kernel) at which the run's "
             "best first reached 95% of its final best. denoised_*: the same on each configuration's median score "
             "over every run of the task (the runs render the same template space; see denoise()).")
    if reduced:
        notes += (f" REDUCED: fewer seeds, tasks or evaluations than the full comparison ({', '.join(full_tasks)}; "
                  f"seeds {list(full_seeds)}; budget {full_budget}); too little data to choose a default.")
    return summary, notes


if __name__ == "__main__":
    main()
