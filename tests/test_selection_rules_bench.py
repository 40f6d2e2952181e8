"""benchmarks/selection_rules.py with shared verdicts: each distinct candidate is judged once across the rules' runs
and across calls (the verdicts file), so that the rules differ only in the order they try candidates."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).parents[1]


def _run(tmp_path: Path, *args: str) -> dict:
    out = subprocess.run([sys.executable, str(ROOT / "benchmarks/selection_rules.py"), "--tasks", "softmax",
                          "--seeds", "1", "--budget", "4", "--share-verdicts", str(tmp_path / "v.jsonl"),
                          "--runs-dir", str(tmp_path / "runs"), "--out", str(tmp_path), *args],
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    (path,) = tmp_path.glob("selection-rules-cpu-*.json")
    return json.loads(path.read_text())


def test_a_candidate_is_judged_once_for_every_rule_and_every_call(tmp_path: Path) -> None:
    first = _run(tmp_path, "--rules", "weighted", "published")
    rows = {r["rule"]: r for r in first["figures"]}
    verdicts = [json.loads(line) for line in (tmp_path / "v.jsonl").read_text().splitlines()]
    # Every verdict is of a different source, and the second rule's run judged only what the first had not.
    assert len({v["source_sha256"] for v in verdicts}) == len(verdicts) == rows["published"]["verdicts_judged_so_far"]
    assert rows["published"]["verdicts_reused_so_far"] >= 1
    assert "Verdicts shared" in first["notes"]
    # A later call (a new process) for a third rule reads the file: what it reuses is not judged again.
    result = next(tmp_path.glob("selection-rules-cpu-*.json"))
    again = _run(tmp_path, "--rules", "weighted", "published", "weighted-explore-0.2", "--resume", str(result))
    third = next(r for r in again["figures"] if r["rule"] == "weighted-explore-0.2")
    grown = len((tmp_path / "v.jsonl").read_text().splitlines())
    assert grown == len(verdicts) + third["verdicts_judged_so_far"]
    assert third["verdicts_reused_so_far"] >= 1
    assert {r["rule"] for r in again["figures"]} == {"weighted", "published", "weighted-explore-0.2"}
