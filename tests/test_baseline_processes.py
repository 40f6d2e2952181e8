"""KSEARCH_BASELINE_PROCESSES=N times each baseline in N fresh processes, the median kept (one process's measurement
moved a whole run's scores by 8% on the H200); one by default."""

from __future__ import annotations

import math
from typing import Any

import pytest

from ksearch.errors import ConfigError
from ksearch.harness import timing
from ksearch.harness.baselines import Baselines, BaselineTiming
from ksearch.tasks import get_task


def _baselines(processes: int, script: list[dict[str, BaselineTiming]], monkeypatch: pytest.MonkeyPatch
               ) -> tuple[Baselines, list[str]]:
    """Baselines whose worker processes report the scripted timings in turn; the entry points each was asked for."""
    task = get_task("softmax")
    base = Baselines(task, "mlx", None, "cpu", lambda _w: None, processes)  # type: ignore[arg-type,return-value]
    asked: list[str] = []

    def timed(_source: str, entry: str, workloads: Any, _deadline: float) -> dict[str, BaselineTiming]:
        asked.append(entry)
        return {w.name: t for w, t in zip(workloads, script[len(asked) - 1].values(), strict=False)}

    monkeypatch.setattr(base, "_time", timed)
    return base, asked


def test_the_median_process_is_kept_with_its_own_gap_and_run(monkeypatch: pytest.MonkeyPatch) -> None:
    w = get_task("softmax").select_workloads("cpu")[0]
    script = [{"a": BaselineTiming(6.8e-4, 1e-5, 3)}, {"a": BaselineTiming(5.9e-4, 2e-5, 3)},
              {"a": BaselineTiming(6.1e-4, 3e-5, 4)}]
    base, asked = _baselines(3, script, monkeypatch)
    assert base.timings("native", [w], math.inf)[w.name] == BaselineTiming(6.1e-4, 3e-5, 4)
    assert len(asked) == 3
    base.timings("native", [w], math.inf)  # known: no process is started again
    assert len(asked) == 3


def test_a_process_that_measured_nothing_counts_as_the_slowest(monkeypatch: pytest.MonkeyPatch) -> None:
    w = get_task("softmax").select_workloads("cpu")[0]
    script = [{"a": BaselineTiming(float("nan"))}, {"a": BaselineTiming(5.0e-4, 1e-5, 3)},
              {"a": BaselineTiming(float("nan"))}]
    base, _ = _baselines(3, script, monkeypatch)
    assert math.isnan(base.timings("native", [w], math.inf)[w.name].latency_s or 0.0)  # two of three failed
    script[2] = {"a": BaselineTiming(4.0e-4, 1e-5, 3)}
    base, _ = _baselines(3, script, monkeypatch)
    assert base.timings("native", [w], math.inf)[w.name].latency_s == 5.0e-4
    base, _ = _baselines(2, script, monkeypatch)  # an even count keeps the faster of the middle two
    assert base.timings("native", [w], math.inf)[w.name].latency_s == 5.0e-4


def test_one_process_by_default_and_the_setting_is_checked(monkeypatch: pytest.MonkeyPatch) -> None:
    assert timing.BASELINE_PROCESSES == 1
    monkeypatch.setattr(timing, "BASELINE_PROCESSES_SETTING", 3)
    assert timing.baseline_processes() == 3
    monkeypatch.setenv("KSEARCH_BASELINE_PROCESSES", "5")
    assert timing._baseline_processes_setting() == 5
    for bad in ("0", "10", "three"):
        monkeypatch.setenv("KSEARCH_BASELINE_PROCESSES", bad)
        with pytest.raises(ConfigError, match=r"KSEARCH_BASELINE_PROCESSES=.*1 to 9"):
            timing._baseline_processes_setting()
