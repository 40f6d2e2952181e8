"""Does profiler feedback help the offline search? Per task and seed, two runs at the same budget and seed, one at a
time: `profile = "best"` (Nsight Compute on each refinement cycle's best candidate, its counters moving the world
model's ratings and the proposer's ranking) against `profile = "off"`. Per run: the evaluations it took to reach 95%
of its own final best and of the better final best of the pair, the final best, and what profiling cost (its wall
time per evaluation and per profiled candidate).

    python benchmarks/profile_feedback.py [--tasks gqa_decode attention] [--seeds 1] [--budget 24]
                                          [--backend mlx-cuda] [--out benchmarks/results] [--runs-dir DIR]
                                          [--modes best off] [--stem NAME]
    python benchmarks/profile_feedback.py --merge PART.json PART.json ... [--out DIR]

`--modes` runs one arm only (a machine that allows 10 minutes a call runs each arm of attention in a call of its
own, with `--stem` naming the part); `--merge` joins such parts into the one result, pairing runs by task and seed.

Needs an NVIDIA GPU with MLX's CUDA build and `ncu` (Nsight Compute) with permission to read the counters; a run
whose profiles carry no counters (ncu missing or refused) is marked `counters_available: false` in its row, and the
summary then says the comparison measured nothing. Writes `profile-feedback-mlx-cuda-<device>.json`
(schema ksearch-bench/1).
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path
from typing import Any

from ksearch.backends import get_backend
from ksearch.bench.results import make_result, merged_parts, write_result
from ksearch.config import RunConfig
from ksearch.search.start import start_run
from ksearch.store import read_run

TASKS = ("gqa_decode", "attention")
MODES = ("best", "off")


def best_curve(records: Any) -> list[float]:
    """The best score after each search evaluation, in budget order."""
    best, out = 0.0, []
    for e in records.evaluations_of("search"):
        best = max(best, e.score if e.status == "passed" else 0.0)
        out.append(best)
    return out


def evals_to(curve: list[float], target: float) -> int | None:
    """The 1-based evaluation at which the curve first reaches `target` (None: never)."""
    if target <= 0:
        return None
    return next((i for i, v in enumerate(curve, 1) if v >= target), None)


def row_from_run(path: Path, task: str, mode: str, seed: int, wall_s: float) -> dict[str, Any]:
    records = read_run(path)
    curve = best_curve(records)
    final = curve[-1] if curve else 0.0
    profiles = [p.data for p in records.profiles]
    with_counters = [p for p in profiles if p.get("status") == "counters"]
    spent = sum(float(p.get("duration_s") or 0.0) for p in profiles)
    fired: dict[str, int] = {}
    for e in records.events:
        if e.kind == "counters":
            for rule in e.data.get("rules") or []:
                fired[rule] = fired.get(rule, 0) + 1
    notes = sorted({str(p.get("note")) for p in profiles if p.get("note")})
    return {
        "task": task, "profile": mode, "seed": seed, "run": path.name, "evaluations": len(curve),
        "final_best": round(final, 4), "evals_to_95pct_own_best": evals_to(curve, 0.95 * final),
        "curve": [round(v, 4) for v in curve], "wall_s": round(wall_s, 1),
        "wall_s_per_evaluation": round(wall_s / max(len(curve), 1), 2),
        "profiles": len(profiles), "profiles_with_counters": len(with_counters),
        "counters_available": bool(with_counters) if mode != "off" else None,
        "profile_s_total": round(spent, 2), "profile_s_per_evaluation": round(spent / max(len(curve), 1), 3),
        "profile_s_per_profile": round(spent / len(profiles), 2) if profiles else None,
        "rules_fired": fired, "profile_notes": notes,
    }


def pair_up(rows: list[dict[str, Any]]) -> None:
    """Evaluations to 95% of the better final best of each (task, seed) pair, on every row of the pair."""
    for key in {(r["task"], r["seed"]) for r in rows}:
        pair = [r for r in rows if (r["task"], r["seed"]) == key]
        both = max(r["final_best"] for r in pair)
        for r in pair:
            r["evals_to_95pct_pair_best"] = evals_to(r["curve"], 0.95 * both)


def summarize(rows: list[dict[str, Any]], budget: Any) -> tuple[dict[str, Any], str]:
    tasks = sorted({r["task"] for r in rows})
    summary: dict[str, Any] = {"budget": budget, "seeds": sorted({r["seed"] for r in rows}), "tasks": tasks}
    for task in tasks:
        on = [r for r in rows if r["task"] == task and r["profile"] == "best"]
        off = [r for r in rows if r["task"] == task and r["profile"] == "off"]
        summary[task] = {
            "counters_available": all(r["counters_available"] for r in on) if on else None,
            "evals_to_95pct_pair_best": {"best": [r["evals_to_95pct_pair_best"] for r in on],
                                         "off": [r["evals_to_95pct_pair_best"] for r in off]},
            "final_best": {"best": [r["final_best"] for r in on], "off": [r["final_best"] for r in off]},
            "profile_s_per_evaluation": [r["profile_s_per_evaluation"] for r in on],
        }
    missing = [r for r in rows if r["profile"] == "best" and not r["counters_available"]]
    notes = ("Offline K-Search, profile best vs off at the same budget and seed, one run at a time. "
             + ("Some profile=best runs got no counters (see profile_notes): for those the comparison measured the "
                "search without counter feedback, the same proposals as profile=off, so any difference there is "
                "measurement noise. " if missing else "")
             + ("" if {r["profile"] for r in rows} == set(MODES) else "One arm only: a part to --merge. ")
             + ("One seed per task: a difference between the arms is as much the proposals' luck as the counters'. "
                if len(summary["seeds"]) == 1 else ""))
    return summary, notes


def merge(parts: list[dict[str, Any]]) -> dict[str, Any]:
    """One result from parts measured on one machine (merged anywhere: the machine's facts come from the parts)."""
    frame = merged_parts(parts, "profile_feedback")
    rows = frame["figures"]
    pair_up(rows)
    summary, notes = summarize(rows, sorted({p["summary"].get("budget") for p in parts}))
    return {**frame, "summary": summary,
            "notes": f"{parts[0]['timing']}. {notes}" if parts[0].get("timing") else notes}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tasks", nargs="+", default=list(TASKS))
    ap.add_argument("--seeds", nargs="+", type=int, default=[1])
    ap.add_argument("--budget", type=int, default=24)
    ap.add_argument("--backend", default="mlx-cuda")
    ap.add_argument("--modes", nargs="+", choices=MODES, default=list(MODES))
    ap.add_argument("--out", default="benchmarks/results")
    ap.add_argument("--stem", default=None, help="the result file's name before -BACKEND-DEVICE.json")
    ap.add_argument("--runs-dir", default=None, help="keep the runs here (default: a temporary directory)")
    ap.add_argument("--merge", nargs="+", default=None, help="join result parts written with --modes")
    args = ap.parse_args()
    if args.merge:
        print(write_result(merge([json.loads(Path(f).read_text()) for f in args.merge]), args.out))
        return
    backend = get_backend(args.backend)
    runs = Path(args.runs_dir or tempfile.mkdtemp(prefix="ksearch-profile-feedback-"))
    rows: list[dict[str, Any]] = []
    for task in args.tasks:
        for seed in args.seeds:
            for mode in args.modes:
                cfg = RunConfig(task=task, backend=backend.name, budget=args.budget, seed=seed,
                                runs_dir=str(runs), profile=mode)
                t0 = time.monotonic()
                out = start_run(cfg)
                row = row_from_run(out.path, task, mode, seed, time.monotonic() - t0)
                rows.append(row)
                print(f"{task} seed {seed} profile={mode}: best {row['final_best']:.3f} after "
                      f"{row['evals_to_95pct_own_best']} evaluations to 95%; profiling "
                      f"{row['profile_s_per_evaluation']} s per evaluation", flush=True)
    pair_up(rows)
    summary, notes = summarize(rows, args.budget)
    result = make_result("profile-feedback", backend, rows, shapes=[], dtypes=[], summary=summary, notes=notes)
    print(write_result(result, args.out, stem=args.stem))


if __name__ == "__main__":
    main()
