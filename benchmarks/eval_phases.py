"""Where one harness evaluation spends its time: seconds per worker request kind (prepare, go, trial, reference, ...)
and per worker start, for one candidate file. Used to find why a GPU evaluation takes minutes.

    python benchmarks/eval_phases.py TASK CANDIDATE.py BACKEND [WORKLOAD,...]
"""

from __future__ import annotations

import collections
import importlib
import sys
import time
from pathlib import Path
from typing import Any

from ksearch.backends import get_backend
from ksearch.harness import EvalOptions, evaluate, process
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


def main() -> None:
    task, path, backend = sys.argv[1], sys.argv[2], sys.argv[3]
    workloads = sys.argv[4].split(",") if len(sys.argv) > 4 else None
    evaluate_mod = importlib.import_module("ksearch.harness.evaluate")  # the module, not the re-exported function
    process.WorkerProcess.request = _timed("request", process.WorkerProcess.request)  # type: ignore[method-assign]
    evaluate_mod.start = _timed("start", evaluate_mod.start)
    t0 = time.perf_counter()
    result = evaluate(get_task(task), Path(path).read_text(), get_backend(backend), EvalOptions(workloads=workloads))
    print(f"{result.status} score={result.score} total={time.perf_counter() - t0:.2f}s")
    for (kind, what), secs in SECONDS.most_common():
        print(f"{kind:8s} {what:12s} x{COUNTS[(kind, what)]:<4d} {secs:8.2f}s")


if __name__ == "__main__":
    main()
