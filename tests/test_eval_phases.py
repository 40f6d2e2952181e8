"""`ksearch bench eval-phases` (bench/phases.py): each evaluation's phases and their parts, and the time without the
candidate's compiles, written as one JSON result."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ksearch.bench.phases import run_phases
from ksearch.harness.evaluator import COMPILES
from ksearch.tasks import get_task


def test_phases_and_their_parts_are_reported_and_compiles_left_out(tmp_path: Path) -> None:
    cpu = [w.name for w in get_task("softmax").workloads if w.tier == "cpu"][:2]
    lines: list[str] = []
    path = run_phases("softmax", "mlx-cpu", [], workloads=cpu, repeat=2, out=tmp_path, echo=lines.append)
    assert path is not None
    data = json.loads(Path(path).read_text())
    for row in data["figures"]:
        phases = row["phases_s"]
        assert row["status"] == "passed"
        for name in ("start candidate", "first trial", "trials", "timing", "timed calls judged", COMPILES,
                     "trials > judging", "trials > the worker says: call",
                     "timing > checked calls' outputs taken and held to their commitments"):
            assert name in phases, (name, sorted(phases))
        # The parts of a phase never exceed it; the compiles left out are each workload's, estimated.
        assert phases["trials > judging"] <= phases["trials"] + 1e-3
        assert phases["timing > checked calls' outputs taken and held to their commitments"] <= phases["timing"]
        left_out = row["total_s"] - row["excluding_compile_s"]
        assert left_out >= 0 and left_out == pytest.approx(phases[COMPILES], abs=1e-3)
    assert any(line.startswith("== starter #2") for line in lines)

