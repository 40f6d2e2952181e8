"""The frame the host-side check benchmarks share (benchmarks/judge_speed.py, benchmarks/fingerprint_speed.py): the
same arguments, and outputs at the sizes of the tasks' GPU search workloads, checked on this machine's CPU."""

from __future__ import annotations

import argparse
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ksearch.tasks.base import Task, Workload


def parse(description: str, default_tasks: Sequence[str]) -> argparse.Namespace:
    """--tasks, --repeat (alternated repeats per workload, medians reported) and --out."""
    ap = argparse.ArgumentParser(description=description)
    ap.add_argument("--tasks", nargs="+", default=list(default_tasks))
    ap.add_argument("--repeat", type=int, default=7)
    ap.add_argument("--out", default="benchmarks/results")
    return ap.parse_args()


def gpu_search_workloads(tasks: Sequence[str]) -> Iterator[tuple[Task, Workload]]:
    """Every GPU search workload of the named tasks, task by task."""
    from ksearch.tasks import get_task

    for name in tasks:
        task = get_task(name)
        for w in task.select_workloads("gpu"):
            yield task, w
