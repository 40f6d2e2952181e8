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


def _part(task: str, device: str = "NVIDIA H200", budget: int = 60) -> dict:
    rows = [{"task": task, "seed": 1, "rule": rule, "budget": budget, "evaluations": budget, "final_best": best,
             "evaluations_to_95pct": 3, "cycles": 4, "cycle_end_reasons": {"stagnation": 3, "budget": 1},
             "stop_kind": "budget", "scores": [0.1, 0.5, best, best]}
            for rule, best in (("weighted", 1.0), ("weighted-explore-0.2", 1.0), ("published", 0.9))]
    return {"schema": "ksearch-bench/1", "name": "selection-rules-gpu", "date": "2026-12-02T04:30:00Z",
            "device": device, "driver": "580", "mlx": "0.32.4", "ksearch": "0.1.0", "backend": "mlx-cuda",
            "python": "3.12.3", "platform": "Linux", "shapes": [f"{task} gpu search workloads"],
            "dtypes": ["float16"], "figures": rows, "summary": {"complete": True, "reduced": True},
            "notes": "Verdicts shared: ..."}


def _merge(tmp_path: Path, *parts: dict) -> subprocess.CompletedProcess[str]:
    files = []
    for k, part in enumerate(parts):
        files.append(tmp_path / f"part{k}.json")
        files[-1].write_text(json.dumps(part))
    return subprocess.run([sys.executable, str(ROOT / "benchmarks/selection_rules.py"), "--merge", *map(str, files),
                           "--out", str(tmp_path / "out")], capture_output=True, text=True, timeout=120)


def test_task_by_task_gpu_parts_merge_into_the_full_comparison_anywhere(tmp_path: Path) -> None:
    done = _merge(tmp_path, _part("gqa_decode"), _part("attention"))
    assert done.returncode == 0, done.stderr[-2000:]
    (path,) = (tmp_path / "out").glob("selection-rules-gpu-mlx-cuda-nvidia-h200.json")
    merged = json.loads(path.read_text())
    # The machine's facts are the parts', not this CPU machine's; both tasks make the GPU comparison complete.
    assert merged["device"] == "NVIDIA H200" and merged["backend"] == "mlx-cuda"
    assert merged["summary"]["reduced"] is False and merged["summary"]["tasks"] == ["gqa_decode", "attention"]
    assert len(merged["figures"]) == 6 and "Verdicts shared" in merged["notes"]
    assert merged["summary"]["published"]["per_task"]["attention"]["mean_final_best"] == 0.9


def test_parts_of_other_machines_or_budgets_are_refused(tmp_path: Path) -> None:
    other = _merge(tmp_path, _part("gqa_decode"), _part("attention", device="NVIDIA A100"))
    assert other.returncode != 0 and "different machines" in other.stderr
    budgets = _merge(tmp_path, _part("gqa_decode"), _part("attention", budget=40))
    assert budgets.returncode != 0 and "different budgets" in budgets.stderr
