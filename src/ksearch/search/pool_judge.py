"""A finished run's judge on several evaluators (`ksearch confirm --workers N` / `--ray-address`): for a run whose
driver has no device of its backend (a cluster judged it), or to time its best where the search did.

Every candidate is timed on one worker, the first live one of the pool's first device kind, against one baseline
measurement that the pool takes from the run's recorded verdicts where they hold for that worker's environment (the
rest measured once there), as a parallel run's end does (search/run_end.py, `RayPool.judge`, `RayPool.holdout`).
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from ksearch.backends import get_backend
from ksearch.config import config_from_json
from ksearch.errors import RunError
from ksearch.harness import EvalResult
from ksearch.search.ray_pool import RayPool
from ksearch.search.start import make_pool
from ksearch.store import RunReader
from ksearch.tasks import get_task


class PoolJudge:
    """The run's judge on a Ray pool of `workers` evaluators, here or on the cluster at `ray_address`."""

    def __init__(self, path: Path, workers: int, ray_address: str | None) -> None:
        with RunReader(path) as reader:
            meta = reader.meta()
            recorded = [e.result for e in reader.evaluations(None)]
        task, backend = str(meta.get("task")), str(meta.get("backend"))
        cfg = replace(config_from_json(meta.get("config")), task=task, backend=backend, workers=workers,
                      ray_address=ray_address)
        pool = make_pool(cfg, task, backend)
        if not isinstance(pool, RayPool):
            raise RunError("--workers 1 without --ray-address is the run's own judge here; leave both out")
        self.pool: RayPool = pool
        self._holdout = bool(get_task(task).holdout_workloads(get_backend(backend).tier))
        try:
            self.pool.share_baselines(recorded)
        except BaseException:
            self.pool.close()
            raise

    def __call__(self, source: str) -> EvalResult:
        return self.pool.judge(source)

    def holdout(self, source: str) -> EvalResult:
        return self.pool.holdout(source)

    def has_holdout(self) -> bool:
        """Whether the task has holdout workloads on the run's backend."""
        return self._holdout

    def close(self) -> None:
        self.pool.close()
