"""What to optimise: tasks, workloads, references, baselines."""

from ksearch.tasks.base import Baseline, Task, TensorSpec, Workload
from ksearch.tasks.registry import TaskNotFound, all_tasks, builtin_names, get_task, load_task_file

__all__ = [
    "Baseline",
    "Task",
    "TaskNotFound",
    "TensorSpec",
    "Workload",
    "all_tasks",
    "builtin_names",
    "get_task",
    "load_task_file",
]
