"""`ksearch bench fidelity` on the CPU backend: it runs end to end at cpu-tier shapes and writes its JSON (no timing
assertion: CPU timings here are for relative comparisons only; the GPU test asserts agreement)."""

from __future__ import annotations

import json

from ksearch.bench.fidelity import candidate_for, run_fidelity
from ksearch.tasks import get_task


def test_fidelity_runs_on_the_cpu_and_writes_its_json(tmp_path, cpu_backend):
    rows = []
    path = run_fidelity("mlx-cpu", ["softmax", "gqa_decode"], tmp_path, workloads_per_task=1, budget_s=0.3,
                        on_row=rows.append)
    data = json.loads(path.read_text())
    assert data["schema"] == "ksearch-bench/1" and data["name"] == "fidelity" and data["backend"] == "mlx-cpu"
    assert data["device"] and data["mlx"]
    assert [f["task"] for f in data["figures"]] == ["softmax", "gqa_decode"] == [r["task"] for r in rows]
    for f in data["figures"]:
        assert f["status"] == "passed", f["message"]
        for key in ("harness_candidate_s", "plain_candidate_s", "harness_baseline_s", "plain_baseline_s",
                    "candidate_ratio", "baseline_ratio"):
            assert f[key] and f[key] > 0, key
        # The plain loop was measured before and after the harness's evaluation; its figure is their median.
        assert len(f["plain_candidate_each_s"]) == f["plain_attempts"] >= 2
        assert min(f["plain_candidate_each_s"]) <= f["plain_candidate_s"] <= max(f["plain_candidate_each_s"])
        assert f["plain_drift"] >= 1.0
    assert "within_tolerance" in data["summary"]


def test_library_kernels_stand_in_only_where_they_run_their_own_kernel(cpu_backend):
    # On the CPU, attention and decode would fall back to MLX's own attention, which candidates may not call.
    for name in ("attention", "gqa_decode"):
        task = get_task(name)
        assert candidate_for(task, cpu_backend, task.select_workloads("cpu"))[0] == "starter"
    scan = get_task("selective_scan")
    assert candidate_for(scan, cpu_backend, scan.select_workloads("cpu"))[0] == "ksearch.kernels.selective_scan"
