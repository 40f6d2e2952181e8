"""The search's judge: one persistent Evaluator a run (its trusted reference worker and baseline cache), and a
finished run's own judge made again from its stored configuration (`ksearch confirm`)."""

from __future__ import annotations

from pathlib import Path

from ksearch.backends import Backend, get_backend
from ksearch.config import RunConfig, config_from_json
from ksearch.harness import EvalOptions, EvalResult, Evaluator
from ksearch.harness.profile import ProfileReport, profile_candidate
from ksearch.store import RunReader
from ksearch.tasks import Task, get_task


class Judge:
    """The search's evaluate function: one persistent Evaluator (trusted reference worker, baseline cache)."""

    def __init__(self, task: Task, backend: Backend, cfg: RunConfig) -> None:
        self.ev = Evaluator(task, backend, int(cfg.memory_limit_gb * (1 << 30)), spare=True)
        self.opts = EvalOptions(baseline=cfg.baseline, timeout_s=cfg.timeout_s,
                                memory_limit_bytes=int(cfg.memory_limit_gb * (1 << 30)))

    def __call__(self, source: str) -> EvalResult:
        return self.ev.evaluate(source, self.opts)

    def profile(self, source: str, result: EvalResult | None) -> ProfileReport:
        """What a profiler sees of a candidate, in a process of its own after its verdict."""
        return profile_candidate(self.ev.task, self.ev.backend, source, result,
                                 memory_limit_bytes=self.opts.memory_limit_bytes)

    def holdout(self, source: str) -> EvalResult:
        opts = EvalOptions(baseline=self.opts.baseline, timeout_s=self.opts.timeout_s,
                           memory_limit_bytes=self.opts.memory_limit_bytes, holdout=True)
        return self.ev.evaluate(source, opts)

    def has_holdout(self) -> bool:
        """Whether the task has holdout workloads on this backend's tier."""
        return bool(self.ev.task.holdout_workloads(self.ev.backend.tier))

    def close(self) -> None:
        self.ev.close()


def run_judge(path: Path) -> Judge:
    """A finished run's own judge (its task, backend, baseline and limits) on this machine, as `ksearch confirm`
    needs it; close it after."""
    with RunReader(path) as reader:
        meta = reader.meta()
    return Judge(get_task(str(meta.get("task"))), get_backend(str(meta.get("backend"))),
                 config_from_json(meta.get("config")))
