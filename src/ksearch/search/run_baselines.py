"""Which baseline timings a run's candidates are scored against when the run spans processes: a resumed run takes the
timings its verdicts recorded, and a parallel run's workers share one measurement a device kind. One process's timing
of a baseline can differ from the next's by 15% on the H200, which would move every later score against the earlier
ones (docs/search.md, "Runs on disk, resume")."""

from __future__ import annotations

from typing import Any

from ksearch.harness import Evaluator
from ksearch.harness.baselines import recorded_timings
from ksearch.store import RunStore


def reuse_recorded(store: RunStore, ev: Evaluator, baseline: str, round_: int) -> None:
    """A resumed run scores against the baseline timings its earlier verdicts used, where they were measured in this
    environment (device, versions, timing settings) of the same baseline code; the others are measured again.
    Recorded as an event `baselines_reused`."""
    known = recorded_timings((e["result"] for e in store.evaluations(None)), ev.baseline_environment(baseline))
    taken = ev.baselines.seed(known)
    store.add_event(round_, "baselines_reused", {"timings": taken, "workloads": sorted({w for _, w in known})})


def share_across_workers(pool: Any, store: RunStore, resumed: bool, round_: int) -> None:
    """A parallel run's workers score against one measurement a device kind (a pool with `share_baselines`, the Ray
    pool's), taken from the run's recorded verdicts where it resumes. Recorded as an event `baselines_shared`."""
    share = getattr(pool, "share_baselines", None)
    if share is not None:
        kinds = share([e["result"] for e in store.evaluations(None)] if resumed else [])
        store.add_event(round_, "baselines_shared", {"device_kinds": kinds})
