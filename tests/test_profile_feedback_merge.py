"""benchmarks/profile_feedback.py --merge: parts measured one arm a call on one machine become one result, anywhere
(no GPU needed to merge); parts from different machines are refused."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from script_module import load_script

ROOT = Path(__file__).parents[1]


def _module() -> Any:
    return load_script("benchmarks/profile_feedback.py")


def _part(mode: str, curve: list[float], device: str = "NVIDIA H200") -> dict[str, Any]:
    row = {"task": "attention", "profile": mode, "seed": 1, "final_best": curve[-1], "curve": curve,
           "counters_available": True if mode == "best" else None, "profile_s_per_evaluation": 1.0}
    return {"schema": "ksearch-bench/1", "name": "profile-feedback", "date": f"2026-12-02T0{len(curve)}:00:00Z",
            "device": device, "backend": "mlx-cuda", "mlx": "0.32.4", "figures": [row], "summary": {"budget": 4},
            "notes": ""}


def test_parts_merge_into_one_paired_result_and_other_machines_are_refused() -> None:
    pf = _module()
    merged = pf.merge([_part("best", [0.1, 0.8, 0.9, 0.92]), _part("off", [0.1, 0.5, 0.82, 0.82])])
    rows = {r["profile"]: r for r in merged["figures"]}
    # 95% of the pair's better best (0.92): reached at the 3rd evaluation with profiling, never without.
    assert rows["best"]["evals_to_95pct_pair_best"] == 3 and rows["off"]["evals_to_95pct_pair_best"] is None
    assert merged["device"] == "NVIDIA H200" and merged["summary"]["attention"]["final_best"] == {
        "best": [0.92], "off": [0.82]}
    assert "One seed per task" in merged["notes"] and "One arm only" not in merged["notes"]
    with pytest.raises(SystemExit, match="different machines"):
        pf.merge([_part("best", [0.5]), _part("off", [0.5], device="NVIDIA A100")])
