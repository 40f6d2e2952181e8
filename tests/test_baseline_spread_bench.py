"""benchmarks/baseline_spread.py on the CPU: fresh evaluators' baseline timings per setting, taking turns, into its
JSON; bad input refused in one line."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).parents[1]
SCRIPT = str(ROOT / "benchmarks/baseline_spread.py")


def test_every_setting_gets_its_evaluators_and_a_spread(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, SCRIPT, "--backend", "mlx-cpu", "--tasks", "rmsnorm", "--evaluators", "2",
                           "--processes", "1,2", "--out", str(tmp_path)], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    (path,) = tmp_path.glob("baseline-spread-mlx-cpu-*.json")
    data = json.loads(path.read_text())
    rows = data["figures"]
    assert {r["processes"] for r in rows} == {1, 2} and len({r["workload"] for r in rows}) >= 2
    for r in rows:
        assert r["evaluators"] == 2 == len(r["timings_s"])
        assert r["spread"] == max(r["timings_s"]) / min(r["timings_s"]) >= 1.0
        assert r["fastest_s"] <= r["latency_s"] <= r["slowest_s"]
    assert set(data["summary"]) == {"1", "2"}


def test_bad_settings_are_refused_in_one_line() -> None:
    for args, said in ((["--evaluators", "1"], "--evaluators 1: 2 at least"),
                       (["--processes", "1,x"], "--processes '1,x': give integers"),
                       (["--processes", "0"], "--processes '0': each setting 1 to 9"),
                       (["--tasks", "nope"], "unknown task 'nope'")):
        bad = subprocess.run([sys.executable, SCRIPT, *args], capture_output=True, text=True, timeout=120)
        assert bad.returncode == 1 and said in bad.stderr.strip().splitlines()[-1], bad.stderr[-500:]
