"""Where harness evaluations spend their time: seconds per worker request kind (prepare, go, trial, reference, ...)
and per worker start, for one or more candidates judged in turn by one Evaluator, as a search judges them (the
baseline is timed once, at the first candidate; the reference worker is kept). Used to find why a GPU evaluation
takes tens of seconds.

    python benchmarks/eval_phases.py TASK BACKEND CANDIDATE.py|family:ID:PARAMS_JSON [...] [--workloads A,B]

A `family:` argument renders a template family with the given parameters, e.g.
`family:attention.cuda.flash_wgmma:{"wg":3,"bn":64,"producer":true}`.
"""

from __future__ import annotations

import collections
import importlib
import json
import sys
import time
from pathlib import Path
from typing import Any

from ksearch.backends import get_backend
from ksearch.harness import EvalOptions, Evaluator, process
from ksearch.tasks import get_task

SECONDS: collections.Counter[tuple[str, str]] = collections.Counter()
COUNTS: collections.Counter[tuple[str, str]] = collections.Counter()


def _timed(kind: str, fn: Any) -> Any:
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        t0 = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            key = (kind, str(args[1].get("op")) if kind == "request" else str(args[0]))
            SECONDS[key] += time.perf_counter() - t0
            COUNTS[key] += 1

    return wrapper


def _source(arg: str) -> tuple[str, str]:
    if not arg.startswith("family:"):
        return Path(arg).name, Path(arg).read_text()
    _, fid, params = arg.split(":", 2)
    from ksearch.policy.templates import all_families

    family = next(f for f in all_families() if f.id == fid)
    return f"{fid} {params}", family.render(json.loads(params))


def main() -> None:
    args = sys.argv[1:]
    workloads = None
    if "--workloads" in args:
        i = args.index("--workloads")
        workloads = args[i + 1].split(",")
        del args[i:i + 2]
    task, backend, candidates = args[0], args[1], args[2:]
    evaluate_mod = importlib.import_module("ksearch.harness.evaluate")  # the module, not the re-exported function
    process.WorkerProcess.request = _timed("request", process.WorkerProcess.request)  # type: ignore[method-assign]
    evaluate_mod.start = _timed("start", evaluate_mod.start)
    with Evaluator(get_task(task), get_backend(backend)) as ev:
        for arg in candidates:
            name, source = _source(arg)
            SECONDS.clear()
            COUNTS.clear()
            t0 = time.perf_counter()
            result = ev.evaluate(source, EvalOptions(workloads=workloads))
            print(f"== {name}: {result.status} score={result.score:.4g} total={time.perf_counter() - t0:.2f}s "
                  f"{(result.message or '')[:300]}")
            for (kind, what), secs in SECONDS.most_common():
                print(f"{kind:8s} {what:12s} x{COUNTS[(kind, what)]:<4d} {secs:8.2f}s")


if __name__ == "__main__":
    main()
