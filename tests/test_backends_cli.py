"""`ksearch backends` and `ksearch tasks`: what this machine has, with its hardware profile."""

from __future__ import annotations

import json
import subprocess
import sys

KS = [sys.executable, "-m", "ksearch.cli"]


def test_backends_json_lists_cpu_with_a_profile() -> None:
    res = subprocess.run([*KS, "backends", "--json"], capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    rows = json.loads(res.stdout)
    cpu = next(r for r in rows if r["backend"] == "mlx-cpu")
    assert cpu["profile"]["llc_bytes"] > 0
    assert cpu["profile"]["memory_gb"] > 0
    assert cpu["environment"]["mlx"]
    real = [r["backend"] for r in rows if not r["environment"].get("emulation")]
    assert real[-1] == "mlx-cpu"  # GPU backends, when present, come first (the default)
    # Emulations come after every real backend: never the default.
    assert [r["backend"] for r in rows][:len(real)] == real


def test_tasks_json_lists_every_builtin_task() -> None:
    res = subprocess.run([*KS, "tasks", "--json"], capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    names = {t["name"] for t in json.loads(res.stdout)}
    assert names == {"softmax", "rmsnorm", "selective_scan", "selective_state_update", "attention", "gqa_decode"}


def test_tasks_says_which_baseline_is_the_default_in_words() -> None:
    import os

    # Piped, no colour: the bold that marks the default is gone, so the words have to say it.
    res = subprocess.run([*KS, "tasks"], capture_output=True, text=True, timeout=60,
                         env={**os.environ, "COLUMNS": "250", "NO_COLOR": "1"})
    assert res.returncode == 0, res.stderr
    rows = {line.split("│")[1].strip(): line for line in res.stdout.splitlines() if line.count("│") > 2}
    assert "naive, native (default)" in rows["softmax"] and "naive (default), community" in rows["selective_scan"]


def test_the_readme_task_table_agrees_with_the_tasks() -> None:
    from pathlib import Path

    from ksearch.tasks import all_tasks

    readme = (Path(__file__).parents[1] / "README.md").read_text()
    table = {cells[0].strip("`"): (cells[1], cells[3]) for line in readme.splitlines()
             if line.startswith("| `") and len(cells := line.strip("| ").split(" | ")) == 4 and "run(" in cells[2]}
    assert len(table) == len(all_tasks())
    for task in all_tasks():
        kind, default = table[task.name]
        assert kind == task.kind, task.name
        assert default.startswith(f"`{task.default_baseline}`"), task.name


def test_a_mac_profile_counts_the_memory_this_machine_has() -> None:
    # A chip's profile gives its largest configuration (an M3 Max: 128 GB); unified memory is what the OS counts, and
    # the timing pools are sized from it (timing.pool_bytes).
    import psutil

    from ksearch.backends.profiles import profile_for

    here = round(psutil.virtual_memory().total / 2**30, 1)
    mac = profile_for("metal", "Apple M3 Max")
    assert mac["matched"] and mac["memory_gb"] == min(128, here)
    assert profile_for("cuda", "NVIDIA H200")["memory_gb"] == 141  # a discrete GPU's own memory



def test_the_tables_cut_nothing_short_in_a_narrow_terminal_or_a_wide_one() -> None:
    import os

    for columns in ("80", "250"):
        for command, whole in (("tasks", "selective_state_update"), ("backends", "mlx-metal-emu")):
            res = subprocess.run([*KS, command], capture_output=True, text=True, timeout=60,
                                 env={**os.environ, "COLUMNS": columns})
            assert res.returncode == 0, res.stderr
            assert whole in res.stdout and "…" not in res.stdout, res.stdout
