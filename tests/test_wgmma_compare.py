"""benchmarks/wgmma_compare.py: the device scripts' choice of a wgmma configuration over a baseline."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from script_module import load_module

SCRIPT = Path(__file__).parent.parent / "benchmarks" / "wgmma_compare.py"
RESULT = {"correct": ["base", "fast", "slow"],
          "bench": [{"base_tflops": 100.0, "fast_tflops": 110.0, "slow_tflops": 90.0, "wrong_tflops": 500.0},
                    {"base_tflops": 200.0, "fast_tflops": 210.0, "slow_tflops": 210.0, "wrong_tflops": 900.0}]}


def _run(tmp_path: Path, *args: str) -> str:
    path = tmp_path / "check.json"
    path.write_text(json.dumps(RESULT))
    return subprocess.run([sys.executable, str(SCRIPT), str(path), *args], capture_output=True, text=True,
                          check=True).stdout.strip()


def test_the_best_correct_candidate_past_the_margin_wins(tmp_path: Path) -> None:
    assert _run(tmp_path, "base", "0.03", "slow", "fast", "wrong") == "fast"  # wrong: fastest, but not correct
    assert _run(tmp_path, "base", "0.10", "slow", "fast") == ""  # fast: +7.3%, under a 10% margin


def test_ratios_are_geometric_means_over_shared_shapes() -> None:
    mod = load_module(SCRIPT)
    r = mod.ratios(RESULT, "base", ["fast", "slow", "missing"])
    assert abs(r["fast"] - (1.1 * 1.05) ** 0.5) < 1e-9 and "missing" not in r
