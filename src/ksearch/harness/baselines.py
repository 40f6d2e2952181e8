"""The trusted baselines' timings: each baseline entry point timed in a trusted worker of its own, once per workload
for every candidate an evaluator judges, the fastest variant kept; a resumed search takes the timings its earlier
verdicts recorded (recorded_timings, Baselines.seed)."""

from __future__ import annotations

import ast
import hashlib
import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from ksearch.harness import timing
from ksearch.harness.measure import time_workload
from ksearch.harness.process import WorkerProcess, start
from ksearch.tasks.base import Task, Workload


def baseline_variants(source: str) -> list[str]:
    """A baseline may time several entry points and keep the fastest (BASELINE_VARIANTS = ("a", "b"))."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return ["run"]
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "BASELINE_VARIANTS"
                                                for t in node.targets):
            try:
                value = ast.literal_eval(node.value)
            except ValueError:
                break
            return [str(v) for v in value] or ["run"]
    return ["run"]


@dataclass(frozen=True)
class BaselineTiming:
    """A baseline's timing on one workload: its latency (None: no baseline; NaN: no variant measured), the harness's
    own time between two of its calls (timing.combine bounds a candidate's by it) and its calls per run."""

    latency_s: float | None = None
    between_calls_s: float | None = None
    run: int | None = None


def _latency(t: BaselineTiming) -> float:
    return math.inf if t.latency_s is None else t.latency_s


def _median(timings: list[BaselineTiming]) -> BaselineTiming | None:
    """The measurement of median latency (the lower middle one of an even count; one not measured counts as the
    slowest), with its own gap and run length."""
    ordered = sorted(timings, key=lambda t: (math.isnan(_latency(t)), _latency(t)))
    return ordered[(len(ordered) - 1) // 2] if ordered else None


def recorded_timings(results: Iterable[Mapping[str, Any]],
                     environment: Mapping[str, Any]) -> dict[tuple[str, str], BaselineTiming]:
    """(baseline, workload) -> the timing that the earliest of `results` (verdicts as EvalResult.to_json writes them)
    measured in `environment` (every key of it equal in the verdict's: Evaluator.baseline_environment, the device,
    versions, timing settings and a digest of the baseline's code) scored its candidate against. A resumed search
    scores against these rather than a new measurement: one baseline timing differs from the next process's by up to
    15% on the H200 (gqa_decode at B 16, 32k: 591 and 681 us, with the candidates' times unchanged), which would move
    every later score against the earlier ones."""
    out: dict[tuple[str, str], BaselineTiming] = {}
    for r in results:
        env = r.get("environment") or {}
        if not r.get("baseline") or any(env.get(k) != v for k, v in environment.items()):
            continue
        for w in r.get("workloads") or []:
            latency = w.get("baseline_latency_s")
            if isinstance(latency, (int, float)) and math.isfinite(latency) and latency > 0:
                out.setdefault((r["baseline"], w["name"]), BaselineTiming(
                    float(latency), w.get("baseline_between_calls_s"), w.get("baseline_timing_run")))
    return out


def timings_record(name: str, environment: Mapping[str, Any], timings: Mapping[str, BaselineTiming]) -> dict[str, Any]:
    """Baseline `name`'s timings per workload as a verdict records them, so that recorded_timings reads them back
    (how a parallel run's first evaluator of a device kind hands its measurement to the others)."""
    return {"baseline": name, "environment": dict(environment),
            "workloads": [{"name": w, "baseline_latency_s": t.latency_s, "baseline_between_calls_s": t.between_calls_s,
                           "baseline_timing_run": t.run} for w, t in timings.items()]}


class Baselines:
    """(baseline, workload) -> BaselineTiming, measured on first use."""

    def __init__(self, task: Task, family: str, emulation: str | None, device: str,
                 plan: Callable[[Workload], timing.TimingPlan], processes: int = 1) -> None:
        """processes: fresh trusted processes each variant is timed in, the median latency kept per workload
        (timing.baseline_processes)."""
        self.task, self.family, self.emulation, self.device, self.plan = task, family, emulation, device, plan
        self.processes = max(1, processes)
        self._known: dict[tuple[str, str], BaselineTiming] = {}

    def source_digest(self, name: str) -> str:
        """A digest of the code baseline `name` times on this backend family ("none" where it has none): verdicts
        record it, so that timings are only reused for the same code."""
        source = self.task.baseline(name).source_for(self.family)
        return hashlib.sha256(source.encode()).hexdigest()[:16] if source is not None else "none"

    def seed(self, known: Mapping[tuple[str, str], BaselineTiming]) -> int:
        """Take timings measured before (recorded_timings) for the (baseline, workload) pairs not yet measured here;
        how many were taken."""
        fresh = {k: v for k, v in known.items() if k not in self._known}
        self._known.update(fresh)
        return len(fresh)

    def timings(self, name: str, workloads: list[Workload], deadline: float) -> dict[str, BaselineTiming]:
        """A BaselineTiming per workload, each variant timed in one trusted worker for all the workloads not yet
        known, the fastest variant kept per workload."""
        todo = [w for w in workloads if (name, w.name) not in self._known]
        source = self.task.baseline(name).source_for(self.family)
        if todo and source is None:
            for w in todo:
                self._known[(name, w.name)] = BaselineTiming()
        elif todo:
            assert source is not None
            best: dict[str, BaselineTiming] = {}
            for entry in baseline_variants(source):
                taken = [self._time(source, entry, todo, deadline) for _ in range(self.processes)]
                for w in todo:
                    measured = _median([t[w.name] for t in taken if w.name in t])
                    if measured is not None and (w.name not in best or _latency(measured) < _latency(best[w.name])):
                        best[w.name] = measured
            for w in todo:
                self._known[(name, w.name)] = best.get(w.name, BaselineTiming(float("nan")))
        return {w.name: self._known[(name, w.name)] for w in workloads}

    def _time(self, source: str, entry: str, workloads: list[Workload],
              deadline: float) -> dict[str, BaselineTiming]:
        out: dict[str, BaselineTiming] = {}
        worker: WorkerProcess | None = None
        try:
            for w in workloads:
                plan = self.plan(w)
                # A baseline timing that was disturbed (its worker stopped by someone, or its clock inconsistent
                # with ours) is measured again rather than believed: a slow baseline would inflate every speedup.
                for _attempt in range(3):
                    if worker is None or worker.proc.poll() is not None:
                        worker, reply = start("baseline", self.task.origin, self.device, 1 << 40, deadline,
                                              source=source, entry=entry, emulation=self.emulation)
                        if not reply.get("ok"):
                            raise RuntimeError(f"baseline ({entry}) failed to load: {reply.get('error')}")
                    stops = worker.stops_seen
                    timed = time_workload(worker, self.task, w, plan, deadline, check=False)
                    measured = timing.combine(timed.rows(), timed.gaps(), leads=timed.leads(), runs=timed.runs())
                    if worker.stops_seen == stops and measured.error is None:
                        break
                runs = [r for rs in timed.runs() for r in rs]
                out[w.name] = BaselineTiming(measured.latency_s, timed.median_gap(), max(runs, default=None))
        finally:
            if worker is not None:
                worker.close()
        return out
