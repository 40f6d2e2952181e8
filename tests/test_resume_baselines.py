"""A resumed search scores its candidates against the baseline timings its earlier verdicts used (where measured in
the same environment), not against a new measurement that may differ by 15% from one process to the next."""

from __future__ import annotations

import math
from typing import Any

import pytest

from ksearch.harness.baselines import Baselines, BaselineTiming, recorded_timings

ENV = {"backend": "mlx-cuda", "device": "NVIDIA H200", "mlx": "0.32.4", "timing_chain": ["q", 0]}


def _verdict(env: dict[str, Any], **latencies: float | None) -> dict[str, Any]:
    return {"baseline": "native", "environment": env,
            "workloads": [{"name": w, "baseline_latency_s": lat, "baseline_between_calls_s": 2e-4,
                           "baseline_timing_run": 24} for w, lat in latencies.items()]}


def test_the_earliest_timing_measured_in_the_same_environment_is_taken() -> None:
    other = {**ENV, "mlx": "0.33.0"}
    results = [
        {"status": "compile_error", "baseline": "native", "environment": ENV, "workloads": []},
        _verdict(other, b1=5e-5, b16=5e-4),             # another MLX: not comparable
        _verdict({**ENV, "containment": {"network": "namespace"}}, b1=6.41e-5, b16=None),  # keys beyond ENV's: fine
        _verdict(ENV, b1=9e-5, b16=5.914e-4),            # later measurements lose to the earliest
        _verdict(ENV, b1=float("nan"), b16=6.813e-4, b8=1.834e-4),
        {"baseline": "", "environment": ENV, "workloads": [{"name": "b2", "baseline_latency_s": 1e-4}]},
    ]
    got = recorded_timings(results, ENV)
    assert got == {("native", "b1"): BaselineTiming(6.41e-5, 2e-4, 24),
                   ("native", "b16"): BaselineTiming(5.914e-4, 2e-4, 24),
                   ("native", "b8"): BaselineTiming(1.834e-4, 2e-4, 24)}
    assert recorded_timings(results, {**ENV, "device": "NVIDIA H100"}) == {}
    # The baseline's code changed between the verdicts and now: nothing is reused.
    coded = [{**r, "environment": {**r["environment"], "baseline_source": "3f1c"}} for r in results]
    assert recorded_timings(coded, {**ENV, "baseline_source": "3f1c"}) == got
    assert recorded_timings(coded, {**ENV, "baseline_source": "77ab"}) == {}


def test_seeding_keeps_what_was_measured_here() -> None:
    from ksearch.tasks import get_task

    task = get_task("softmax")
    def no_plan(_w: Any) -> Any:
        pytest.fail("nothing is measured here")

    base = Baselines(task, "mlx", None, "cpu", no_plan)
    w = task.select_workloads("cpu")[0]
    assert base.seed({("native", w.name): BaselineTiming(1e-3, 1e-5, 8)}) == 1
    assert base.seed({("native", w.name): BaselineTiming(2e-3, 1e-5, 8), ("native", "x"): BaselineTiming(1.0)}) == 1
    assert base.timings("native", [w], math.inf)[w.name] == BaselineTiming(1e-3, 1e-5, 8)


def test_a_resumed_run_scores_against_its_first_baseline_measurement(tmp_path: Any) -> None:
    from ksearch.config import RunConfig
    from ksearch.search.start import create_run, execute

    cfg = RunConfig(task="softmax", backend="mlx-cpu", budget=3, runs_dir=str(tmp_path), confirm_top=0)
    store, _, _ = create_run(cfg)
    execute(store, cfg, stop_after=1)
    (first,) = store.evaluations("search")
    assert first["status"] == "passed"
    measured = {w["name"]: w["baseline_latency_s"] for w in first["result"]["workloads"]}
    execute(store, cfg)
    later = store.evaluations("search")[1:]
    assert len(later) == 2
    for e in later:  # floats from a new process's measurement would differ in their last digits at least
        assert {w["name"]: w["baseline_latency_s"] for w in e["result"]["workloads"]} == measured
    assert len({e["result"]["environment"]["baseline_source"] for e in store.evaluations("search")}) == 1
    (event,) = store.events("baselines_reused")
    assert event["data"]["timings"] == len(measured) and event["data"]["workloads"] == sorted(measured)
