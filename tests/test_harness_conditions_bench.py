"""benchmarks/harness_conditions.py on the CPU: the worker's own loop (in runs, one call a run, and with its parts
taken out) runs in one process beside the plain loop and writes its JSON."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from script_module import load_script

ROOT = Path(__file__).parents[1]


def test_the_worker_loop_conditions_run_and_write_their_rows(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks/harness_conditions.py"), "--backend", "mlx-cpu",
                           "--tasks", "rmsnorm", "--workloads", "1", "--calls", "4", "--worker-loop", "--long-run", "16",
                           "--only-extra",
                           "--stem", "hc", "--out", str(tmp_path)], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    (path,) = tmp_path.glob("hc-mlx-cpu-*.json")
    rows = json.loads(path.read_text())["figures"]
    conditions = {r["condition"] for r in rows}
    assert conditions == {f"loop:{v}" for v in ("plain", "plain_runs", "plain_runs_long", "runs", "runs_settled",
                                                 "runs_no_stamp", "runs_flush", "runs_bare", "runs_long",
                                                 "worker", "no_ring", "no_commit", "no_stamp", "bare")}
    assert all(r["latency_s"] > 0 and r["calls"] > 0 for r in rows)
    # Each loop against the plain loop of its own kind: queued runs against queued runs.
    for r in rows:
        if r["condition"] in ("loop:plain", "loop:plain_runs", "loop:plain_runs_long"):
            assert r["vs_plain_ratio"] == 1.0
    run = {r["condition"]: r["run"] for r in rows}
    assert run["loop:runs_long"] == run["loop:plain_runs_long"] > run["loop:runs"] == run["loop:plain_runs"] > 1


def test_between_runs_times_every_condition_beside_nothing_and_refuses_an_unknown_task(tmp_path: Path) -> None:
    script = str(ROOT / "benchmarks/between_runs.py")
    done = subprocess.run([sys.executable, script, "--backend", "mlx-cpu", "--tasks", "rmsnorm", "--runs", "2",
                           "--out", str(tmp_path)], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    (path,) = tmp_path.glob("between-runs-mlx-cpu-*.json")
    rows = json.loads(path.read_text())["figures"]
    groups = {(r["workload"], r["contender"]) for r in rows}
    assert len(groups) >= 2  # the starter and the baseline, on every CPU workload
    for group in groups:
        mine = {r["condition"]: r for r in rows if (r["workload"], r["contender"]) == group}
        assert list(mine) == ["none", "idle_300us", "fingerprint", "fingerprint_kept", "read_back", "busy_300us",
                              "host_scalar", "host_array"]
        assert mine["none"]["vs_none_ratio"] == 1.0
        assert all(r["latency_s"] > 0 and r["runs"] == 2 and r["run"] >= 1 for r in mine.values())
    bad = subprocess.run([sys.executable, script, "--tasks", "nope"], capture_output=True, text=True, timeout=120)
    assert bad.returncode == 1
    assert bad.stderr.strip().splitlines()[-1].startswith("between_runs: unknown task 'nope'")


def test_the_fused_fingerprint_gives_the_workers_lanes() -> None:
    # between_runs.py's `fingerprint_fused` (timed on a GPU only) must measure the same commitment, not a cheaper one.

    import mlx.core as mx

    from ksearch.harness import digest

    module = load_script("benchmarks/between_runs.py")
    fused = module.fused_fingerprinter()
    for dtype in (mx.float16, mx.float32, mx.bfloat16, mx.int8, mx.bool_, mx.int64):
        calls = [(mx.random.normal((33, 17), key=mx.random.key(i)).astype(dtype), mx.arange(5, dtype=mx.int32) * i)
                 for i in range(3)]
        assert fused(calls).tolist() == digest.fingerprints_mx(calls).tolist()
    # A different output changes its call's lanes and only those.
    calls = [(mx.ones((64,)),), (mx.ones((64,)),)]
    changed = [(mx.ones((64,)),), (mx.ones((64,)) * 2,)]
    a, b = fused(calls).tolist(), fused(changed).tolist()
    assert a[0] == b[0] and a[1] != b[1]


def test_process_spread_measures_free_and_pinned_processes_and_refuses_bad_input(tmp_path: Path) -> None:
    script = str(ROOT / "benchmarks/process_spread.py")
    done = subprocess.run([sys.executable, script, "--backend", "mlx-cpu", "--tasks", "rmsnorm", "--processes", "2",
                           "--workloads", "1", "--budget", "0.1", "--out", str(tmp_path)],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    (path,) = tmp_path.glob("process-spread-mlx-cpu-*.json")
    data = json.loads(path.read_text())
    rows = data["figures"]
    assert {r["mode"] for r in rows} == {"free", "pinned"}
    assert {r["contender"].split(":")[0] for r in rows} == {"candidate", "baseline"}
    for r in rows:
        assert len(r["process_s"]) == 2 and all(t > 0 for t in r["process_s"])
        assert r["spread"] == max(r["process_s"]) / min(r["process_s"]) and r["within_process"] >= 1.0
    assert data["summary"]["pinned_cpu"] in os.sched_getaffinity(0)
    bad_cpu = subprocess.run([sys.executable, script, "--cpu", "4096"], capture_output=True, text=True, timeout=120)
    assert bad_cpu.returncode == 1 and "process_spread: CPU 4096 is not one this process may use" in bad_cpu.stderr
    bad_task = subprocess.run([sys.executable, script, "--tasks", "nope"], capture_output=True, text=True, timeout=120)
    assert bad_task.returncode == 1
    assert bad_task.stderr.strip().splitlines()[-1].startswith("process_spread: unknown task 'nope'")


def test_process_trace_splits_every_run_into_host_and_device_parts(tmp_path: Path) -> None:
    script = str(ROOT / "benchmarks/process_spread.py")
    done = subprocess.run([sys.executable, script, "--backend", "mlx-cpu", "--tasks", "rmsnorm", "--workloads", "1",
                           "--trace", "1", "--out", str(tmp_path)], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    (path,) = tmp_path.glob("process-trace-mlx-cpu-*.json")
    rows = json.loads(path.read_text())["figures"]
    assert {r["contender"].split(":")[0] for r in rows} == {"candidate", "baseline"}
    for r in rows:
        assert 1 <= len(r["fifths"]) <= 5 and r["runs"] >= len(r["fifths"])
        calls = [p["call_s"] for p in r["fifths"]]
        assert r["spread"] == max(calls) / min(calls)
        for p in r["fifths"]:
            # Each part is a median of its own, so the parts of a fifth need not add up exactly.
            assert all(p[f] >= 0 for f in ("build_s", "dispatch_s", "dispatch_cpu_s", "wait_s"))
            assert 0.5 < (p["build_s"] + p["dispatch_s"] + p["wait_s"]) / p["call_s"] < 2.0
            assert p["cpus"] and all(c >= -1 for c in p["cpus"])
