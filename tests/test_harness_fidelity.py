"""`ksearch bench fidelity` on the CPU backend: it runs end to end at cpu-tier shapes and writes its JSON (no timing
assertion: CPU timings here are for relative comparisons only; the GPU test asserts agreement)."""

from __future__ import annotations

import dataclasses
import json
import os

import pytest

from ksearch.bench.fidelity import run_fidelity
from ksearch.bench.plain_loop import SAME_AS_CANDIDATE, candidate_for
from ksearch.errors import ConfigError
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
        # The fixed protocol: plain, harness, plain, harness, plain; each side's figure is the median of its own.
        assert len(f["plain_candidate_each_s"]) == f["plain_attempts"] == 3
        assert min(f["plain_candidate_each_s"]) <= f["plain_candidate_s"] <= max(f["plain_candidate_each_s"])
        assert len(f["harness_candidate_each_s"]) == len(f["harness_baseline_each_s"]) == 2
        assert min(f["harness_baseline_each_s"]) <= f["harness_baseline_s"] <= max(f["harness_baseline_each_s"])
        assert f["plain_drift"] >= 1.0 and f["harness_drift"] >= 1.0
        # The speedup each side gives (baseline / candidate) and how far the harness's is from the plain loop's.
        assert f["harness_speedup"] == pytest.approx(f["harness_baseline_s"] / f["harness_candidate_s"])
        assert f["plain_speedup"] == pytest.approx(f["plain_baseline_s"] / f["plain_candidate_s"])
        assert f["speedup_ratio"] == pytest.approx(f["baseline_ratio"] / f["candidate_ratio"])
        # How the harness ran its timed calls, per evaluation: run lengths as the plan has them (runs of at most two
        # on the CPU) and the time between calls, the candidate's and the baseline's, which the gap bound compares.
        assert all(1 <= r <= f["run"] for r in f["harness_run"]) and len(f["harness_run"]) == 2
        assert all(1 <= r <= f["run"] for r in f["harness_baseline_run"]) and len(f["harness_baseline_run"]) == 2
        assert all(g > 0 for g in f["harness_between_calls_s"] + f["harness_baseline_between_calls_s"])
        # Whether each harness figure is one the plain loop itself gives, within the tolerance of its own range.
        for who in ("candidate", "baseline"):
            plain = f[f"plain_{who}_each_s"]
            assert f[f"{who}_within_plain_spread"] == all(
                min(plain) / 1.1 <= h <= max(plain) * 1.1 for h in f[f"harness_{who}_each_s"])
    assert "within_tolerance" in data["summary"]
    assert data["summary"]["within_plain_spread"] == all(
        f[f"{who}_within_plain_spread"] for f in data["figures"] for who in ("candidate", "baseline"))
    assert data["summary"]["worst_speedup_deviation"] == pytest.approx(
        max(abs(f["speedup_ratio"] - 1) for f in data["figures"]))
    # Each task's score as a search would give it (the geomean of baseline / candidate over the workloads), per
    # harness evaluation and for the plain loop: one workload per task here, so the score is that workload's ratio.
    for f in data["figures"]:
        score = data["summary"]["scores"][f["task"]]
        assert score["harness_each"] == pytest.approx(
            [b / c for b, c in zip(f["harness_baseline_each_s"], f["harness_candidate_each_s"], strict=True)])
        assert score["plain"] == pytest.approx(f["plain_baseline_s"] / f["plain_candidate_s"])


def test_library_kernels_stand_in_only_where_they_run_their_own_kernel(cpu_backend):
    # On the CPU, attention and decode would fall back to MLX's own attention, which candidates may not call.
    for name in ("attention", "gqa_decode"):
        task = get_task(name)
        assert candidate_for(task, cpu_backend, task.select_workloads("cpu"))[0] == "starter"
    scan = get_task("selective_scan")
    assert candidate_for(scan, cpu_backend, scan.select_workloads("cpu"))[0] == "ksearch.kernels.selective_scan"


def test_the_plain_loop_calls_each_contender_back_to_back_in_blocks(cpu_backend):
    # A call that follows another kernel's is not what a caller's loop times: after the warm-up and the probe, the
    # calls come in blocks of one contender, at least six long, the contenders' blocks in turn.
    import mlx.core as mx

    from ksearch.bench.plain_loop import plain_times

    task = get_task("softmax")
    w = task.select_workloads("cpu")[0]
    order: list[str] = []

    def contender(name):
        def run(x, **_params):
            order.append(name)
            return mx.softmax(x, axis=-1)
        return run

    times = plain_times(task, w, {"a": contender("a"), "b": contender("b")}, sets=2, budget_s=0.05, blocks=3)
    timed = order[10:]  # 3 warm-up calls and 2 probe rounds of each
    blocks = [[timed[0], 1]]
    for name in timed[1:]:
        if name == blocks[-1][0]:
            blocks[-1][1] += 1
        else:
            blocks.append([name, 1])
    assert [b[0] for b in blocks] == ["a", "b"] * 3
    assert all(n >= 6 for _, n in blocks)
    assert len(times["a"]) == sum(n for name, n in blocks if name == "a")


def test_the_plain_loop_chains_a_chained_tasks_calls_as_the_harness_does(cpu_backend):
    from ksearch.bench.plain_loop import plain_times

    task = get_task("gqa_decode")
    w = task.select_workloads("cpu")[0]
    took: list = []
    made: list = []

    def run(q, k_cache, v_cache, length):
        took.append(q)
        made.append(q + 1)
        return made[-1]

    plain_times(task, w, {"a": run}, sets=3, budget_s=0.02, blocks=1, run=2)
    assert len(took) > 10 and all(took[i] is made[i - 1] for i in range(1, len(took)))
    assert took[0] is not made[0]


def test_task_calls_chain_only_where_the_task_declares_a_chain(cpu_backend):
    # The diagnostic scripts (between_runs.py, process_spread.py --trace) make their runs through task_calls.
    import itertools

    from ksearch.bench.plain_loop import task_calls

    seen: list = []
    sets = [{"x": 1}, {"x": 2}]
    plain = get_task("rmsnorm")
    assert plain.chain is None
    call = task_calls(plain, lambda x, scale: seen.append(x) or x * scale, itertools.cycle(sets), {"scale": 10})
    assert [call(), call(), call()] == [10, 20, 10] and seen == [1, 2, 1]
    decode = get_task("gqa_decode")
    assert decode.chain == ("q", 0)
    seen.clear()
    call = task_calls(decode, lambda q, length: seen.append(q) or q + length, itertools.cycle([{"q": 1}, {"q": 5}]),
                      {"length": 100})
    assert [call(), call(), call()] == [101, 201, 301] and seen == [1, 101, 201]


def test_a_harness_figure_is_within_the_plain_loops_spread_only_inside_its_range_widened_by_the_tolerance():
    from ksearch.bench.fidelity import TOLERANCE, _within_plain_spread

    plain = [40e-6, 52e-6, 60e-6]  # a plain loop that disagrees with itself by 1.5x
    assert _within_plain_spread([58e-6, 65e-6], plain) is True  # 1.13x its median, yet inside 60 us + 10%
    assert _within_plain_spread([40e-6 / (1 + TOLERANCE) * 0.99], plain) is False
    assert _within_plain_spread([60e-6 * (1 + TOLERANCE) * 1.01, 50e-6], plain) is False  # every evaluation counts
    assert _within_plain_spread([], plain) is None and _within_plain_spread([50e-6], []) is None


def test_fresh_processes_measure_the_plain_loop_once_each_between_the_harness_evaluations(tmp_path, cpu_backend):
    # --processes N: N harness evaluations, N + 1 plain-loop measurements, every one in a process of its own; with
    # --null, the candidate's own source is the baseline on both sides (in the children too)
    path = run_fidelity("mlx-cpu", ["softmax"], tmp_path, workloads_per_task=1, budget_s=0.2, processes=2, null=True)
    data = json.loads(path.read_text())
    (f,) = data["figures"]
    assert f["status"] == "passed", f["message"]
    assert f["baseline"] == SAME_AS_CANDIDATE and f["plain_baseline_variant"] == "run"
    assert f["plain_attempts"] == 3 and len(f["harness_candidate_each_s"]) == 2
    assert len(set(f["plain_pids"])) == 3 and os.getpid() not in f["plain_pids"]
    assert all(x > 0 for x in f["plain_candidate_each_s"] + f["plain_baseline_each_s"])
    assert "fresh process" in data["summary"]["protocol"]
    # each evaluation says what contained the candidate's worker, so runs under KSEARCH_SANDBOX settings compare
    assert len(f["harness_containment"]) == 2 and all("filesystem" in c for c in f["harness_containment"])
    with pytest.raises(ConfigError, match="2 or more fresh processes"):
        run_fidelity("mlx-cpu", ["softmax"], tmp_path, processes=1)


def test_a_plain_loop_process_that_fails_says_why(cpu_backend, monkeypatch):
    from ksearch.backends import get_backend
    from ksearch.bench.plain_loop import plain_in_fresh_process
    from ksearch.tasks import get_task

    task = get_task("softmax")
    (w,) = task.select_workloads("cpu")[:1]
    # a workload the child cannot find: it exits non-zero, and the error carries its last words
    w = dataclasses.replace(w, name="no_such_workload")
    with pytest.raises(RuntimeError, match="exited with 1: (.|\n)*no workload .no_such_workload."):
        plain_in_fresh_process(task, get_backend("mlx-cpu"), [w], {w.name: 2}, {w.name: 1}, 0.1)


def test_the_null_test_times_the_candidates_source_as_the_baseline(cpu_backend):
    from ksearch.bench.plain_loop import contenders, with_candidate_as_baseline

    task = get_task("softmax")
    workloads = task.select_workloads("cpu")[:1]
    same = with_candidate_as_baseline(task, cpu_backend, workloads)
    source = candidate_for(task, cpu_backend, workloads)[1]
    assert same.baseline(None).source_for(cpu_backend.family) == source
    assert task.default_baseline != SAME_AS_CANDIDATE  # the task itself is left as it was
    _, _, fns = contenders(same, cpu_backend, workloads)
    assert set(fns) == {"candidate", "baseline:run"}
