"""A real local Ray cluster on the CPU (2 slots), shared by this module: a 2-worker search whose worker is killed
mid-run loses nothing and spends its budget exactly (its best timed again and the pick judged on the holdout on a
worker); a parallel search killed mid-flight (SIGKILL) resumes and judges its in-flight candidates again."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from ksearch.config import RunConfig
from ksearch.search.start import start_run
from ksearch.store import RunNotFound, RunReader, RunUnreadable, read_run

ray = pytest.importorskip("ray")
# One local cluster for the module: its tests stay in one pytest-xdist worker (make test runs --dist loadgroup).
pytestmark = pytest.mark.xdist_group("ray")

KS = [sys.executable, "-m", "ksearch.cli"]


@pytest.fixture(scope="module")
def cluster() -> Any:
    # "local": a cluster of its own, even where one runs on this machine already.
    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False, logging_level="ERROR")
    yield ray.get_runtime_context().gcs_address
    ray.shutdown()


def _cfg(tmp_path: Path, **kw: Any) -> RunConfig:
    return RunConfig(**{"task": "softmax", "backend": "mlx-cpu", "runs_dir": str(tmp_path), "seed": 1, **kw})


def test_a_worker_killed_mid_run_loses_nothing_and_the_budget_is_exact(cluster: str, tmp_path: Path) -> None:
    killed: list[str] = []
    pids: dict[str, int] = {}

    def on_event(kind: str, data: dict[str, Any]) -> None:
        if kind == "workers":
            pids.update({w["id"]: w["pid"] for w in data["workers"]})
        if kind == "dispatch" and data.get("node_id") not in (None, "root") and not killed:
            killed.append(data["candidate"])
            os.kill(pids[data["worker"]], signal.SIGKILL)  # the actor judging it dies

    out = start_run(_cfg(tmp_path, budget=3, workers=2, confirm_top=2, confirm_times=1), on_event=on_event)
    assert out.status == "finished" and out.stop_kind == "budget"
    recs = read_run(out.path)
    evals = recs.evaluations_of("search")
    assert [e.eval_index for e in evals] == [1, 2, 3]  # exactly the budget, in arrival order
    assert Counter(e.candidate_id for e in evals)[killed[0]] == 1  # judged again, recorded once
    assert max(Counter(e.candidate_id for e in evals).values()) == 1
    assert [e.data["candidate"] for e in recs.events if e.kind == "worker_lost"] == killed
    workers = {e.result["environment"]["evaluator"]["worker"] for e in evals}
    assert workers == {"w1", "w2"}
    # Both workers, and the one Ray restarted, scored against one baseline measurement (share_baselines).
    assert [e.data for e in recs.events if e.kind == "baselines_shared"] == [{"device_kinds": 1}]
    # A verdict reached before timing (a candidate that failed, or timed out on a loaded machine) carries no baseline,
    # nor does a workload its evaluation stopped before; every passed one does, and every workload timed anywhere
    # carries the same baseline.
    timed = [e for e in evals if any(w["baseline_latency_s"] is not None for w in e.result["workloads"])]
    assert {e.eval_index for e in evals if e.result["status"] == "passed"} <= {e.eval_index for e in timed}
    assert timed, [e.result["status"] for e in evals]
    baselines: dict[str, set[float]] = {}
    for e in timed:
        for w in e.result["workloads"]:
            if w["baseline_latency_s"] is not None:
                baselines.setdefault(w["name"], set()).add(w["baseline_latency_s"])
    assert baselines and all(len(seen) == 1 for seen in baselines.values()), baselines
    assert all(w["baseline_latency_s"] is not None for e in evals if e.result["status"] == "passed"
               for w in e.result["workloads"])
    kinds = {e.result["environment"]["evaluator"]["device_kind"] for e in evals}
    assert len(kinds) == 1 and kinds.pop().startswith("mlx-cpu:")
    # Its best two timed again once each on a worker (the driver holds no evaluator), against the shared baseline,
    # then the pick judged on the holdout there.
    again = recs.evaluations_of("confirm")
    passed = {e.candidate_id for e in evals if e.status == "passed"}
    assert len(again) == min(2, len(passed)) and {e.candidate_id for e in again} <= passed
    assert all(w["baseline_latency_s"] in baselines[w["name"]] for e in again if e.status == "passed"
               for w in e.result["workloads"])
    pick = recs.meta.get("chosen_candidate")
    assert out.confirmation is not None and pick == (out.confirmation.pick.candidate if out.confirmation.pick
                                                     else recs.meta.get("best_candidate"))
    assert [h.candidate_id for h in recs.evaluations_of("holdout")] == [pick]


def _state(run: Path) -> tuple[int, int]:
    """(evaluations recorded, candidates in flight) of a run being written elsewhere."""
    try:
        with RunReader(run) as reader:
            n = len(reader.evaluations("search"))
        return n, len((read_run(run).meta.get("loop_state") or {}).get("in_flight") or [])
    except (RunNotFound, RunUnreadable, KeyError, AttributeError):
        return 0, 0


def test_a_parallel_run_killed_mid_flight_resumes_and_judges_its_candidates_again(cluster: str,
                                                                                 tmp_path: Path) -> None:
    proc = subprocess.Popen([*KS, "run", "softmax", "--backend", "mlx-cpu", "--budget", "9", "--runs-dir",
                             str(tmp_path), "--quiet", "--seed", "2", "--ray-address", cluster, "--workers", "2"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    deadline, run = time.time() + 150, None
    while time.time() < deadline and proc.poll() is None:
        runs = [d for d in tmp_path.iterdir() if (d / "run.db").exists()]
        if runs:
            done, flying = _state(runs[0])
            if done >= 1 and flying >= 1:
                run = runs[0]
                break
        time.sleep(0.2)
    assert run is not None, proc.communicate(timeout=10)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=10)
    with RunReader(run) as reader:
        before = len(reader.evaluations("search"))
    # Paused at 4 evaluations in all (as exact as the budget; it spares the test the holdout).
    out = start_run(_cfg(tmp_path), resume=run.name, placement={"ray_address": cluster}, stop_after=4)
    assert out.status == "stopped" and out.stop_kind == "paused"
    recs = read_run(run)
    evals = recs.evaluations_of("search")
    assert [e.eval_index for e in evals] == list(range(1, 5))
    assert max(Counter(e.candidate_id for e in evals).values()) == 1
    requeued = [c for e in recs.events if e.kind == "requeue" for c in e.data["candidates"]]
    assert requeued and set(requeued) <= {e.candidate_id for e in evals[before:]}


def test_confirm_on_the_cluster_times_a_finished_run_against_its_recorded_baseline(cluster: str,
                                                                                   tmp_path: Path) -> None:
    # `ksearch confirm --ray-address`: a run a cluster judged is timed again there (search/pool_judge.py), against
    # the baseline its verdicts recorded, and --adopt judges the pick's holdout on the same worker.
    import json

    run = start_run(_cfg(tmp_path, budget=1, confirm_top=0)).path
    recorded = {w["name"]: w["baseline_latency_s"] for e in read_run(run).evaluations_of("search")
                for w in e.result["workloads"]}
    proc = subprocess.run([*KS, "confirm", str(run), "--top", "1", "--times", "1", "--adopt", "--json",
                           "--ray-address", cluster, "--workers", "1"], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = json.loads(proc.stdout)
    assert out["candidates"][0]["statuses"] == ["passed"] and out["adopted"]["candidate"] == out["pick"]
    held = out["adopted"]["holdout"]
    again = {w["name"]: w["baseline_latency_s"] for w in held["workloads"] if w["split"] == "search"}
    assert held["status"] == "passed" and again == recorded  # the recorded baseline, not a new measurement
    assert read_run(run).meta.get("chosen_candidate") == out["pick"]


def test_a_cluster_without_free_slots_is_refused_in_one_line(cluster: str, tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    # Another job holds both CPU slots: the run says so at once instead of waiting for its actors to start.
    from ksearch.errors import RunError
    from ksearch.search import ray_pool

    monkeypatch.setattr(ray_pool, "FREE_WAIT_S", 1.0, raising=False)
    monkeypatch.setattr(ray_pool, "START_TIMEOUT_S", 30.0)

    @ray.remote(num_cpus=2)
    class Hog:
        def ping(self) -> int:
            return 1

    hog = Hog.remote()  # type: ignore[attr-defined]
    ray.get(hog.ping.remote())
    try:
        t0 = time.monotonic()
        with pytest.raises(RunError, match=r"only 0 of the 2 CPU slot\(s\) of the Ray cluster at .* are free"):
            start_run(_cfg(tmp_path, workers=1, ray_address=cluster))
        assert time.monotonic() - t0 < 20
        assert not any(tmp_path.iterdir())
    finally:
        ray.kill(hog)
        deadline = time.time() + 30  # the slots back before the next test
        while ray.available_resources().get("CPU", 0) < 2 and time.time() < deadline:
            time.sleep(0.2)


def test_a_cluster_that_refuses_the_token_is_named_in_one_line(cluster: str, tmp_path: Path) -> None:
    # A cluster with token authentication (Ray 2.60 turns it on where a token is at hand) joined by an explicit address
    # from a process without RAY_AUTH_MODE=token: one line that says so, not Ray's line a second on stderr.
    if os.environ.get("RAY_AUTH_MODE") != "token":
        pytest.skip("this Ray starts clusters without token authentication")
    env = {k: v for k, v in os.environ.items() if k != "RAY_AUTH_MODE"}
    env["RAY_gcs_server_port_wait_time_s"] = "2"  # Ray's own retries: 2 instead of 20
    proc = subprocess.run([*KS, "run", "softmax", "--backend", "mlx-cpu", "--budget", "1", "--runs-dir", str(tmp_path),
                           "--quiet", "--ray-address", cluster], capture_output=True, text=True, timeout=120, env=env)
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert proc.stderr.count("\n") == 1 and "set RAY_AUTH_MODE=token" in proc.stderr, proc.stderr[-2000:]
    assert not any(tmp_path.iterdir())


def test_workers_here_start_their_own_ray_whatever_ray_address_names(tmp_path: Path) -> None:
    # RAY_ADDRESS (or a `ray start` on this machine) names a running cluster: `--workers 2` without --ray-address
    # judges on a Ray instance of its own, which it stops at its end.
    env = {**os.environ, "RAY_ADDRESS": "127.0.0.1:1"}
    proc = subprocess.run([*KS, "run", "softmax", "--backend", "mlx-cpu", "--budget", "2", "--stop-after", "1",
                           "--runs-dir", str(tmp_path), "--quiet", "--workers", "2"], capture_output=True, text=True,
                          timeout=240, env=env)
    assert proc.returncode == 0, proc.stderr[-2000:]
    (run,) = list(tmp_path.iterdir())
    evals = read_run(run).evaluations_of("search")
    assert [e.status for e in evals] == ["passed"]
    assert evals[0].result["environment"]["evaluator"]["worker"] in ("w1", "w2")


def test_sigterm_stops_a_parallel_run_as_ctrl_c_does(cluster: str, tmp_path: Path) -> None:
    # SIGTERM while the driver waits in Ray for a verdict: exit 143, the run stopped and resumable, one line.
    proc = subprocess.Popen([*KS, "run", "softmax", "--backend", "mlx-cpu", "--budget", "6", "--runs-dir",
                             str(tmp_path), "--quiet", "--ray-address", cluster, "--workers", "2"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 150
    while time.time() < deadline and proc.poll() is None:
        runs = [d for d in tmp_path.iterdir() if (d / "run.db").exists()]
        if runs and _state(runs[0])[1] >= 1:
            break
        time.sleep(0.2)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 143, err[-2000:]
    assert "Traceback" not in err and err.strip().splitlines()[-1].endswith("continues it"), err[-2000:]
    (run,) = list(tmp_path.iterdir())
    meta = read_run(run).meta
    assert (meta.get("status"), meta.get("stop_kind")) == ("stopped", "interrupted")
    assert "SIGTERM" in meta.get("stop_reason")
