"""The plain loop that `ksearch bench fidelity` holds the harness to: the contenders a caller would call (the task's
library kernel or starter, and its default baseline's entry points), timed side by side in one process as a caller's
loop calls them, in this process or in a fresh one.

A fresh process a measurement: the harness times every candidate in a new worker process, and at calls of 35-120 us
of several MLX operations the plain loop's own medians moved 1.14-1.51x from one fresh process to the next on the H200
(benchmarks/process_spread.py), so a plain loop kept in one process compares one process's host speed with many.
`python -m ksearch.bench.plain_loop REQUEST.json OUT.json` is that fresh process (plain_in_fresh_process).
"""

from __future__ import annotations

import dataclasses
import importlib.util
import itertools
import json
import os
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ksearch.backends import Backend
    from ksearch.tasks.base import Task, Workload

#: Library kernels as candidates: `run` calling the library function with the task's inputs.
LIBRARY = {
    "attention": ("ksearch.kernels.attention", "from ksearch.kernels import attention\n\n\n"
                  "def run(q, k, v, causal):\n    return attention(q, k, v, causal)\n"),
    "gqa_decode": ("ksearch.kernels.decode", "from ksearch.kernels import decode\n\n\n"
                   "def run(q, k_cache, v_cache, length):\n    return decode(q, k_cache, v_cache, length)\n"),
    "selective_scan": ("ksearch.kernels.selective_scan",
                       "from ksearch.kernels import selective_scan\n\n\n"
                       "def run(u, delta, A, B, C, D, z, delta_bias):\n"
                       "    return selective_scan(u, delta, A, B, C, D, z, delta_bias)\n"),
    "selective_state_update": ("ksearch.kernels.selective_state_update",
                               "from ksearch.kernels import selective_state_update\n\n\n"
                               "def run(x, z, conv_state, conv_weight, conv_bias, x_proj_weight, dt_proj_weight, "
                               "dt_bias, A, D, ssm_state):\n"
                               "    return selective_state_update(x, z, conv_state, conv_weight, conv_bias, "
                               "x_proj_weight, dt_proj_weight, dt_bias, A, D, ssm_state)\n"),
}


def _library_runs_its_own_kernel(task: Task, w: Workload) -> bool:
    """attention and decode fall back to MLX's own attention (forbidden to candidates) where no kernel of ours fits."""
    from ksearch.harness.pool import set_inputs

    if task.name not in ("attention", "gqa_decode"):
        return True
    x = set_inputs(task, w, 0, 0)
    if task.name == "attention":
        from ksearch.kernels.attention import prefill_plan

        return prefill_plan(x["q"], x["k"], x["v"], bool(w.params["causal"]))[0] != "native"
    from ksearch.kernels.decode import decode_plan

    return decode_plan(x["q"], x["k_cache"], x["v_cache"], int(w.params["length"]))[0] != "native"


def candidate_for(task: Task, backend: Backend, workloads: list[Workload]) -> tuple[str, str]:
    """(name, source): the library kernel where it runs its own kernel on every workload, else the starter."""
    if task.name in LIBRARY and all(_library_runs_its_own_kernel(task, w) for w in workloads):
        name, source = LIBRARY[task.name]
        return name, source
    return "starter", task.starting_source(backend.family)


def load_source(source: str, tag: str) -> Any:
    with tempfile.NamedTemporaryFile("w", suffix=".py", delete=False) as f:
        f.write(source)
    spec = importlib.util.spec_from_file_location(f"ksearch_fidelity_{tag}", f.name)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    Path(f.name).unlink(missing_ok=True)
    return module


def side_by_side(task: Task, backend: Backend, workloads: list[Workload]) -> dict[str, Callable[..., Any]]:
    """The contenders the side-by-side benchmarks time for a task (benchmarks/between_runs.py, process_spread.py):
    `candidate:NAME` (candidate_for) and `baseline:ENTRY` for each entry point of the task's default baseline."""
    name, _, fns = contenders(task, backend, workloads)
    return {(f"candidate:{name}" if key == "candidate" else key): fn for key, fn in fns.items()}


def plain_times(task: Task, w: Workload, contenders: dict[str, Callable[..., Any]], sets: int,
                budget_s: float = 1.5, blocks: int = 5, run: int = 1) -> dict[str, list[float]]:
    """Seconds of each contender's calls, one value per `run` calls, side by side in this process: each contender's
    calls back to back (a block), as a caller's loop makes them, `run` calls queued and their outputs evaluated
    together with the device synchronised inside the clock (the harness's runs; run 1: each call evaluated and
    synchronised), the contenders' blocks in turn, `blocks` times over; every contender cycles through the same `sets`
    input sets (standalone arrays, as the harness's pool holds them). Blocks rather than one call of each contender in
    turn: a call that follows another kernel's is not what a caller's loop times (the library decode at B 1, 160 us
    after its own calls, took 213 us after native's and a cache copy's; H200). About `budget_s` seconds, 6 to 60
    values per contender a block."""
    import statistics as stats

    from ksearch.bench.timing import time_rounds
    from ksearch.harness.pool import set_inputs

    base = set_inputs(task, w, 1, 0)
    pool = [base] + [set_inputs(task, w, 1, k, base) for k in range(1, sets)]
    params = dict(w.params)
    fns: dict[str, Callable[[], Any]] = {}
    for name, fn in contenders.items():
        fns[name] = task_calls(task, fn, itertools.cycle(pool), params)
    run = max(1, run)
    probe = time_rounds(fns, 2, run, warmup=3, sync_each=run == 1)
    share = budget_s / max(1, blocks * len(fns))
    per_block = {k: max(6, min(60, int(share / max(1e-6, run * stats.median(v))))) for k, v in probe.items()}
    times: dict[str, list[float]] = {k: [] for k in fns}
    for _ in range(blocks):
        for name, fn in fns.items():
            times[name].extend(time_rounds({name: fn}, per_block[name], run, warmup=0, sync_each=run == 1)[name])
    return times




def task_calls(task: Task, fn: Callable[..., Any], cycle: Iterator[dict[str, Any]],
               params: dict[str, Any]) -> Callable[[], Any]:
    """A contender's calls as the harness's timed runs make them: on the input sets in turn, each taking the previous
    call's output where the task declares a chain (Task.chain), independent otherwise."""
    from ksearch.bench.timing import chained_calls

    if task.chain is not None:
        return chained_calls(fn, cycle, *task.chain, params)
    return partial(_independent, fn, cycle, params)


def _independent(fn: Callable[..., Any], cycle: Iterator[dict[str, Any]], params: dict[str, Any]) -> Any:
    return fn(**next(cycle), **params)


def plain_measurement(task: Task, w: Workload, contenders: dict[str, Callable[..., Any]], sets: int,
           budget_s: float, run: int) -> dict[str, Any]:
    """One plain-loop measurement: the candidate's median, min and max call, and the fastest baseline variant's."""
    times = plain_times(task, w, contenders, sets, budget_s, run=run)
    meds = {k: statistics.median(v) for k, v in times.items()}
    base_key = min((k for k in meds if k != "candidate"), key=lambda k: meds[k], default=None)
    return {"candidate": meds["candidate"], "min": min(times["candidate"]), "max": max(times["candidate"]),
            "baseline": meds[base_key] if base_key else None,
            "variant": base_key.split(":", 1)[1] if base_key else None}


def prepare_backend(b: Backend) -> None:
    """This process's MLX set up as the harness's workers set theirs: the CPU as the default device on a CPU backend,
    the Metal emulation installed on an emulated one."""
    import mlx.core as mx

    if not b.is_gpu:
        mx.set_default_device(mx.cpu)
    if b.emulated:
        from ksearch.metalemu.surface import install

        install(str(b.emulation))


#: The baseline a null test names: the candidate's own source, timed by the harness in its trusted baseline worker.
SAME_AS_CANDIDATE = "same-as-candidate"


def with_candidate_as_baseline(task: Task, b: Backend, workloads: list[Workload]) -> Task:
    """The task with the candidate's source as its default baseline (SAME_AS_CANDIDATE): the null test of the
    harness, whose speedup (baseline / candidate) is then 1.0 where its candidate and baseline workers time alike."""
    from ksearch.tasks.base import Baseline

    source = candidate_for(task, b, workloads)[1]
    same = Baseline(SAME_AS_CANDIDATE, {"any": source}, "the candidate's own source (a null test)")
    return dataclasses.replace(task, baselines={**task.baselines, SAME_AS_CANDIDATE: same},
                               default_baseline=SAME_AS_CANDIDATE)


def contenders(task: Task, b: Backend, workloads: list[Workload]) -> tuple[str, str, dict[str, Callable[..., Any]]]:
    """(the candidate's name, its source, {"candidate": its run, "baseline:ENTRY": each baseline entry point})."""
    from ksearch.harness.baselines import baseline_variants

    cand_name, cand_source = candidate_for(task, b, workloads)
    fns: dict[str, Callable[..., Any]] = {"candidate": load_source(cand_source, f"{task.name}_candidate").run}
    base_source = task.baseline(task.default_baseline).source_for(b.family)
    if base_source is not None:
        module = load_source(base_source, f"{task.name}_baseline")
        fns |= {f"baseline:{v}": getattr(module, v) for v in baseline_variants(base_source)}
    return cand_name, cand_source, fns


def plain_measurements(task: Task, b: Backend, workloads: list[Workload], sets_of: dict[str, int],
                       run_of: dict[str, int], budget_s: float,
                       fns: dict[str, Callable[..., Any]] | None = None) -> dict[str, dict[str, Any]]:
    """One plain-loop measurement a workload, in this process (its pid recorded with each)."""
    import mlx.core as mx

    fns = fns if fns is not None else contenders(task, b, workloads)[2]
    out = {w.name: {**plain_measurement(task, w, fns, sets_of[w.name], budget_s, run_of[w.name]), "pid": os.getpid()}
           for w in workloads}
    mx.clear_cache()
    return out


def plain_in_fresh_process(task: Task, b: Backend, workloads: list[Workload], sets_of: dict[str, int],
                           run_of: dict[str, int], budget_s: float,
                           timeout_s: float = 900.0) -> dict[str, dict[str, Any]]:
    """plain_measurements in a new Python process (this one's interpreter and environment), which exits after it."""
    request = {"task": task.origin or task.name, "backend": b.name, "workloads": [w.name for w in workloads],
               "null": task.default_baseline == SAME_AS_CANDIDATE,
               "sets": sets_of, "run": run_of, "budget_s": budget_s}
    with tempfile.TemporaryDirectory(prefix="ksearch-plain-") as tmp:
        req, out = Path(tmp) / "request.json", Path(tmp) / "plain.json"
        req.write_text(json.dumps(request))
        try:
            proc = subprocess.run([sys.executable, "-m", "ksearch.bench.plain_loop", str(req), str(out)],
                                  capture_output=True, text=True, timeout=timeout_s, check=False)
        except subprocess.TimeoutExpired as exc:
            raise RuntimeError(f"the plain loop's process for {task.name} ran past {timeout_s:.0f} s and was "
                               "killed") from exc
        if proc.returncode != 0 or not out.exists():
            tail = (proc.stderr or proc.stdout).strip()[-1500:]
            raise RuntimeError(f"the plain loop's process for {task.name} exited with {proc.returncode}: {tail}")
        result: dict[str, dict[str, Any]] = json.loads(out.read_text())
        return result


def main(argv: list[str]) -> None:
    from ksearch.backends import get_backend
    from ksearch.tasks import get_task

    request_path, out_path = argv
    request = json.loads(Path(request_path).read_text())
    b = get_backend(request["backend"])
    prepare_backend(b)
    task = get_task(request["task"])
    workloads = [task.workload(n) for n in request["workloads"]]
    if request.get("null"):
        task = with_candidate_as_baseline(task, b, workloads)
    result = plain_measurements(task, b, workloads, request["sets"], request["run"], request["budget_s"])
    Path(out_path).write_text(json.dumps(result))


if __name__ == "__main__":
    main(sys.argv[1:])
