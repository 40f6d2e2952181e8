"""The trusted baselines' timings: each baseline entry point timed in a trusted worker of its own, once per workload
for every candidate an evaluator judges, the fastest variant kept."""

from __future__ import annotations

import ast
import math
from collections.abc import Callable
from dataclasses import dataclass

from ksearch.harness import timing
from ksearch.harness.measure import time_workload
from ksearch.harness.process import WorkerProcess, initialise, spawn, start
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


class Baselines:
    """(baseline, workload) -> BaselineTiming, measured on first use."""

    def __init__(self, task: Task, family: str, emulation: str | None, device: str,
                 plan: Callable[[Workload], timing.TimingPlan]) -> None:
        self.task, self.family, self.emulation, self.device, self.plan = task, family, emulation, device, plan
        self._known: dict[tuple[str, str], BaselineTiming] = {}
        # (baseline name, entry point) -> a worker spawned ahead (spawn_ahead), then initialised (ready_ahead)
        self._spawned: dict[tuple[str, str], WorkerProcess] = {}
        self._ready: dict[tuple[str, str], WorkerProcess] = {}

    def _todo(self, name: str, workloads: list[Workload]) -> list[Workload]:
        return [w for w in workloads if (name, w.name) not in self._known]

    def spawn_ahead(self, name: str, workloads: list[Workload]) -> None:
        """Spawn the worker of the baseline's first entry point now if any of these workloads is not timed yet: its
        interpreter and imports then overlap the candidate's start instead of adding to the evaluation (a second on
        a 2-core CPU). Nothing is timed in it before the candidate's processes are gone (`timings`)."""
        source = self.task.baseline(name).source_for(self.family)
        if source is None or not self._todo(name, workloads):
            return
        key = (name, baseline_variants(source)[0])
        if key not in self._spawned and key not in self._ready:
            self._spawned[key] = spawn("baseline", self.task.origin, self.device, 1 << 40)

    def ready_ahead(self, deadline: float) -> None:
        """Initialise the workers spawned ahead (their imports done, the baseline loaded): called before a
        candidate's timed calls, so that no worker start runs beside them. A worker that fails is dropped; the
        baseline then starts its own as usual."""
        while self._spawned:
            (name, entry), worker = self._spawned.popitem()
            source = self.task.baseline(name).source_for(self.family)
            try:
                reply = initialise(worker, self.task.origin, self.device, deadline, source=source, entry=entry,
                                   emulation=self.emulation)
            except Exception:  # noqa: BLE001 - a worker that cannot start is replaced by `timings`
                reply = {"ok": False}
            if reply.get("ok"):
                self._ready[(name, entry)] = worker
            else:
                worker.close()

    def close(self) -> None:
        for worker in [*self._spawned.values(), *self._ready.values()]:
            worker.close()
        self._spawned.clear()
        self._ready.clear()

    def timings(self, name: str, workloads: list[Workload], deadline: float) -> dict[str, BaselineTiming]:
        """A BaselineTiming per workload, each variant timed in one trusted worker for all the workloads not yet
        known, the fastest variant kept per workload."""
        todo = self._todo(name, workloads)
        source = self.task.baseline(name).source_for(self.family)
        if todo and source is None:
            for w in todo:
                self._known[(name, w.name)] = BaselineTiming()
        elif todo:
            assert source is not None
            best: dict[str, BaselineTiming] = {}
            for entry in baseline_variants(source):
                for wname, measured in self._time(source, entry, todo, deadline, self._take_ahead(name, entry)).items():
                    if wname not in best or _latency(measured) < _latency(best[wname]):
                        best[wname] = measured
            for w in todo:
                self._known[(name, w.name)] = best.get(w.name, BaselineTiming(float("nan")))
        return {w.name: self._known[(name, w.name)] for w in workloads}

    def _take_ahead(self, name: str, entry: str) -> WorkerProcess | None:
        """The worker readied ahead for this entry point if it is still alive; one spawned but never readied (the
        candidate failed before its timed calls) is closed: it is started again only after the candidate is gone."""
        stale = self._spawned.pop((name, entry), None)
        if stale is not None:
            stale.close()
        worker = self._ready.pop((name, entry), None)
        if worker is not None and worker.proc.poll() is not None:
            worker.close()
            return None
        return worker

    def _time(self, source: str, entry: str, workloads: list[Workload], deadline: float,
              worker: WorkerProcess | None = None) -> dict[str, BaselineTiming]:
        """Each workload timed in one trusted worker (`worker`, initialised ahead, or one started here)."""
        out: dict[str, BaselineTiming] = {}
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
