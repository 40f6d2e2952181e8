"""Isolation, timing and baselines: what a candidate's process may do to the rest, and what it can no longer do."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import psutil
import pytest

from ksearch.harness import EvalOptions, EvalResult, evaluate
from ksearch.tasks import get_task

CANDIDATES = Path(__file__).parent / "candidates"
WORKER = "ksearch.harness.worker"


def judge(backend: Any, task_name: str, candidate: str, **options: Any) -> EvalResult:
    task = get_task(task_name)
    options.setdefault("workloads", [task.select_workloads("cpu")[0].name])
    options.setdefault("timeout_s", 90.0)
    return evaluate(task, (CANDIDATES / f"{candidate}.py").read_text(), backend, EvalOptions(**options))


@pytest.fixture(autouse=True)
def no_worker_survives():
    yield
    left = []
    for p in psutil.Process().children(recursive=True):
        try:
            if WORKER in " ".join(p.cmdline()):
                left.append(p)
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    for p in left:
        p.kill()
    assert not left, f"worker processes survived the evaluation: {[p.pid for p in left]}"


def _honest_speedup(result: EvalResult) -> float:
    """The candidates below compute exactly what the naive baseline computes: an honest speedup is about 1."""
    assert result.status == "passed", result.message
    (w,) = result.workloads
    assert w.latency_s and w.baseline_latency_s and w.speedup
    return w.speedup


def test_child_process_of_the_candidate_is_killed(cpu_backend):
    marker = f"ksearch-test-sleeper-{os.getpid()}-{time.monotonic_ns()}"
    result = judge(cpu_backend, "softmax", "spawn_sleeper", extra_env={"KSEARCH_TEST_MARKER": marker})
    assert result.status == "passed", result.message
    assert "spawned a sleeper" in result.message
    deadline = time.monotonic() + 5
    alive = _with_marker(marker)
    while alive and time.monotonic() < deadline:
        time.sleep(0.05)
        alive = _with_marker(marker)
    for p in alive:
        p.kill()
    assert not alive, "the candidate's child outlived the evaluation"


def _with_marker(marker: str) -> list[psutil.Process]:
    found = []
    for p in psutil.process_iter(["cmdline", "status"]):
        if marker in (p.info["cmdline"] or []) and p.info["status"] != psutil.STATUS_ZOMBIE:
            found.append(p)
    return found


def test_timer_patched_everywhere_is_a_runtime_error(cpu_backend):
    result = judge(cpu_backend, "softmax", "timer_patch_all")
    assert result.status == "runtime_error"
    assert "inconsistent timings" in result.message


def test_timer_patched_in_the_time_module_only_changes_nothing(cpu_backend):
    # The worker captured its clock before the candidate was imported.
    result = judge(cpu_backend, "softmax", "timer_patch_module", baseline="naive")
    assert result.status == "passed", result.message
    # "cycle": the bound from the time between calls took over, which a loaded machine's noise can make happen too;
    # "parent" would mean the worker's clock was not believed.
    assert result.workloads[0].timing_source in ("worker", "cycle")
    assert 0.2 < _honest_speedup(result) < 5


def test_patched_eval_does_not_skip_the_work(cpu_backend):
    result = judge(cpu_backend, "softmax", "patched_eval", baseline="naive")
    assert 0.2 < _honest_speedup(result) < 5


def _gains_nothing(result: EvalResult) -> bool:
    """Caught (a stale answer for a timed call's inputs), or timed at about what the work costs."""
    return result.status in ("wrong_answer", "runtime_error") or 0.2 < _honest_speedup(result) < 5


def test_memoising_on_the_input_object_does_not_skip_the_work(cpu_backend):
    # Every timed call gets new array objects.
    result = judge(cpu_backend, "softmax", "cache_by_identity", baseline="naive")
    assert _gains_nothing(result), result.message


def test_memoising_on_input_contents_or_address_does_not_skip_the_work(cpu_backend):
    # Timed calls get new contents (one fresh value in every row, see harness/pool.py): a memo keyed on the whole
    # contents never hits, one keyed on an address or a few values returns stale answers, which the checks catch.
    result = judge(cpu_backend, "softmax", "cache_by_content", baseline="naive")
    assert _gains_nothing(result), result.message


def test_baseline_patched_in_the_candidates_process_is_unaffected(cpu_backend):
    # The candidate makes mx.exp/max/sum sleep 50 ms in its own process; the baseline is timed in a trusted worker.
    result = judge(cpu_backend, "softmax", "patched_baseline", baseline="naive")
    assert result.workloads[0].baseline_latency_s < 0.05
    assert 0.2 < _honest_speedup(result) < 5


def test_baseline_is_timed_after_the_candidate_is_gone(cpu_backend):
    # The candidate's thread keeps SIGSTOPping every other worker; it must be dead before the baseline is timed.
    result = judge(cpu_backend, "softmax", "sabotage_baseline", baseline="naive")
    assert 0.2 < _honest_speedup(result) < 5


def test_memory_hog_is_killed_at_the_cap(cpu_backend):
    result = judge(cpu_backend, "softmax", "memory_hog", memory_limit_bytes=1 << 30)
    assert result.status == "runtime_error"
    assert "memory" in result.message


def test_transient_memory_peak_is_caught(cpu_backend, tmp_path):
    # Allocates 1.5 GB and frees it within one call, faster than the parent polls: the kernel's high-water mark
    # (VmHWM) still shows it.
    src = (
        "import mlx.core as mx\n"
        "def run(x):\n"
        "    big = mx.ones(((3 << 29) // 4,), dtype=mx.float32)\n"
        "    mx.eval(big)\n"
        "    del big\n"
        "    mx.clear_cache()\n"
        "    return mx.zeros_like(x)\n"
    )
    task = get_task("softmax")
    result = evaluate(task, src, cpu_backend, EvalOptions(workloads=[task.select_workloads("cpu")[0].name],
                                                          memory_limit_bytes=1 << 30, timeout_s=60))
    assert result.status == "runtime_error", result.message
    assert "memory" in result.message


def test_rewriting_the_workers_timed_call_is_caught(cpu_backend):
    # The candidate replaces the worker's batch loop: no work, honest outputs only for the calls kept for checks,
    # times that add up to the wall clock, and no commitments.
    result = judge(cpu_backend, "softmax", "patched_worker_loop", baseline="naive")
    assert result.status == "runtime_error", result.message
    assert "committed to" in result.message


def test_rewritten_loop_with_made_up_commitments_is_caught(cpu_backend):
    # The same, but it commits to every call with the fingerprint of an output it never computed.
    result = judge(cpu_backend, "softmax", "patched_worker_commit", baseline="naive")
    assert result.status == "wrong_answer", result.message
    assert "not the ones it committed to" in result.message


def test_rewritten_loop_that_returns_stale_outputs_is_caught(cpu_backend):
    # The work of one call in 16, honest commitments to the stale outputs it hands back for the others.
    result = judge(cpu_backend, "softmax", "patched_worker_stale", baseline="naive")
    assert result.status == "wrong_answer", result.message
    assert "behaves differently when timed" in result.message


def test_rewritten_loop_that_works_outside_its_clock_gains_nothing(cpu_backend):
    # All the work, honest commitments, but evaluated after the clock stops: the time between calls counts.
    result = judge(cpu_backend, "softmax", "patched_worker_clock", baseline="naive")
    assert result.workloads[0].timing_source == "cycle", result.message
    assert 0.2 < _honest_speedup(result) < 5


def test_skipping_work_only_when_timed_is_caught(cpu_backend):
    # Correct in every trial, zeros in every timed call (it recognises them by its caller's frames).
    result = judge(cpu_backend, "softmax", "junk_when_timed", baseline="naive")
    assert result.status == "wrong_answer", result.message
    assert "behaves differently when timed" in result.message


def test_no_worker_left_after_an_evaluator_closes(cpu_backend):
    from ksearch.harness import Evaluator

    task = get_task("softmax")
    with Evaluator(task, cpu_backend) as ev:
        ev.evaluate((CANDIDATES / "nan_output.py").read_text(),
                    EvalOptions(workloads=[task.select_workloads("cpu")[0].name], timeout_s=60))
        assert ev._ref is not None and ev._ref.proc.poll() is None  # the trusted reference worker is kept warm
    # the fixture checks that it is gone now


@pytest.mark.parametrize("task_name", ["softmax", "selective_scan", "gqa_decode"])
def test_timed_inputs_are_laid_out_as_callers_pass_them_and_never_repeat(task_name):
    # Checks compare a timed call's output with the reference for that call's inputs, which the reference worker
    # rebuilds from scratch: both ways must give the same bytes. Every tensor is a standalone row-contiguous array of
    # its own shape (a whole KV cache, not a view), and no two calls see the same contents.
    import mlx.core as mx
    import numpy as np

    from ksearch.harness.pool import TimingPool, call_inputs

    mx.set_default_device(mx.cpu)
    task = get_task(task_name)
    w = task.select_workloads("cpu")[0]
    sets = 3
    pool = TimingPool(task, w, 11, sets)
    seen = set()
    for batch, call in ((5, 0), (5, 1), (5, 2), (5, 3), (6, 4), (6, 7), (7, 9)):
        got = pool.take(batch, call)
        mx.eval(list(got.values()))
        want = call_inputs(task, w, 11, sets, batch, call)
        for name, spec in ((s.name, s) for s in task.inputs):
            a = got[name]
            assert a.shape == spec.resolved_shape(w) and a.dtype == want[name].dtype
            view = np.array(a, copy=False)
            assert view.flags["C_CONTIGUOUS"] and view.ctypes.data % view.itemsize == 0
            assert bool(mx.array_equal(a, want[name])), (name, call)
        seen.add(tuple(np.array(got[task.inputs[0].name].astype(mx.float32)).reshape(-1).tolist()))
        del got
    assert len(seen) == 7


def test_stamps_keep_each_inputs_sign_and_scale_and_change_every_call():
    # A call's stamps are the set's own values times the call's factor (0.5 to 1.5, from the batch key): A of
    # selective_state_update stays negative, large tensors change in one column a row, small ones are drawn anew.
    import mlx.core as mx
    import numpy as np

    from ksearch.harness.pool import FACTOR_LOW, TimingPool, call_factor, set_inputs

    mx.set_default_device(mx.cpu)
    factors = [call_factor(b, c) for b in range(3) for c in range(50)]
    assert all(FACTOR_LOW <= f < FACTOR_LOW + 1 for f in factors) and len(set(factors)) == len(factors)
    task = get_task("selective_state_update")
    w = task.select_workloads("gpu")[0]  # its states are large enough to be stamped (the CPU's are drawn whole)
    pool = TimingPool(task, w, 5, 2)
    first = set_inputs(task, w, 5, 0)
    previous = {k: np.array(v.astype(mx.float32)) for k, v in first.items()}
    for call in (0, 2, 4):  # set 0 each time
        got = {k: np.array(v.astype(mx.float32)) for k, v in pool.take(9, call).items()}
        assert (got["A"] < 0).all()
        for name in ("x", "D"):  # small: drawn anew whole, not a scaled copy (a homogeneous function could use that)
            ratio = got[name] / previous[name]
            assert float(ratio.max() - ratio.min()) > 0.1
        rows = got["ssm_state"].reshape(-1, got["ssm_state"].shape[-1])
        changed = rows != previous["ssm_state"].reshape(rows.shape)
        assert changed.any(axis=1).mean() > 0.9 and (changed.sum(axis=1) <= 1).all()  # one column a row
        previous = got
