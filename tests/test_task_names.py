"""A task's name becomes part of its runs' directory names: a task file whose name is not one (a path, empty, too
long) is refused in one line before anything is written, and a run id never holds a path separator."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from ksearch.errors import RunError
from ksearch.store import new_run_id
from ksearch.tasks import all_tasks
from ksearch.tasks.base import NAME_RULE, name_problem

USER_TASK = Path(__file__).parent / "data" / "user_task.py"
KS = [sys.executable, "-m", "ksearch.cli"]


def _task_file(folder: Path, name: str) -> Path:
    text = USER_TASK.read_text()
    assert 'name="scaled_add"' in text
    path = folder / "named_task.py"
    path.write_text(text.replace('name="scaled_add"', f"name={name!r}"))
    return path


@pytest.mark.parametrize("name, shown", [
    ("scaled_add_" + "x" * 300, "(311 characters)"),
    ("../../etc/evil", "'../../etc/evil'"),
    ("", "''"),
    (".hidden", "'.hidden'"),
    ("two words", "'two words'"),
], ids=["long", "path", "empty", "dot", "space"])
def test_a_task_file_with_a_name_no_run_can_carry_is_one_line(name: str, shown: str, tmp_path: Path) -> None:
    task = _task_file(tmp_path, name)
    runs = tmp_path / "runs"
    res = subprocess.run([*KS, "run", str(task), "--budget", "3", "--backend", "mlx-cpu", "--runs-dir", str(runs),
                          "--quiet"], capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert res.returncode == 2, (res.stdout, res.stderr)
    lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and "Traceback" not in res.stderr, res.stderr
    assert lines[0].startswith(f"error: task file {task}: TASK's name ") and shown in lines[0]
    assert lines[0].endswith(NAME_RULE)
    assert not runs.exists() and sorted(p.name for p in tmp_path.iterdir()) == ["named_task.py"]


def test_a_name_of_64_characters_is_a_task_name() -> None:
    assert name_problem("a" * 64) is None and name_problem("a" * 65) is not None
    assert name_problem("v1.2_rms-norm") is None


def test_every_builtin_task_has_a_task_name() -> None:
    assert [t.name for t in all_tasks() if name_problem(t.name) is not None] == []


@pytest.mark.parametrize("name", ["a/b", "..", "../up", "a\\b", "", "x" * 65],
                         ids=["slash", "dotdot", "up", "backslash", "empty", "long"])
def test_a_run_id_is_never_made_of_a_name_that_is_not_one(name: str) -> None:
    with pytest.raises(RunError, match="is not a task name"):
        new_run_id(name)


def test_a_run_id_is_one_directory_name() -> None:
    run_id = new_run_id("softmax")
    assert "/" not in run_id and "-softmax-" in run_id
