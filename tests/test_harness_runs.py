"""Timed calls in runs (timing.RUN): the worker's loop, the plan's run lengths and the gap bound per run."""

from __future__ import annotations

import random
import socket
import threading
from collections.abc import Callable
from typing import Any

import pytest

from ksearch.harness import timing


def test_work_moved_into_one_gap_of_a_run_is_counted() -> None:
    # Six calls of 100 us a run; a candidate that leaves 3 ms of work to the gap after each run's last call (a thread
    # finishing what the calls started). Per call, the median cycle is the call itself; per run, the work shows.
    times = [1e-4] * 60
    gaps = ([0.0] * 5 + [3e-3]) * 10
    runs = [[6] * 10]
    batches = [(sum(times) + sum(gaps), 60, times)]
    measured = timing.combine(batches, [gaps], trusted_gap=1e-5, slack=20e-6, runs=runs)
    assert measured.source == "cycle"
    assert measured.latency_s > 4e-4
    # The same gaps spread as the harness's own work (the trusted worker's gap is as large): no correction.
    honest = timing.combine(batches, [gaps], trusted_gap=5e-4, slack=20e-6, runs=runs)
    assert honest.source == "worker" and honest.latency_s == pytest.approx(1e-4)


def test_per_run_means_fall_back_to_calls_when_runs_do_not_add_up() -> None:
    assert timing.per_run([1.0, 2.0, 3.0, 4.0], [2, 2]) == [1.5, 3.5]
    assert timing.per_run([1.0, 2.0, 3.0], [2, 2]) == [1.0, 2.0, 3.0]
    assert timing.per_run([1.0, 2.0], None) == [1.0, 2.0]


def test_a_batch_holds_four_runs_and_the_ring_room() -> None:
    assert timing.RUN * 2 <= timing.RING
    assert timing.batch_floor(timing.RUN) == timing.RUNS_PER_BATCH * timing.RUN
    assert timing.batch_floor(1) == timing.MIN_BATCH_CALLS
    plan = timing.TimingPlan(pool_sets=12, warmup=3, warmup_s=0.1, batches=5, target_batch_s=0.08, checks=2, run=6)
    assert timing.run_for(plan, 0.0) == timing.run_for(plan, 1e-4) == timing.run_for(plan, 6e-3) == 6
    # Calls of milliseconds: four runs of six would take over two batch targets.
    assert timing.run_for(plan, 10e-3) == 4 and timing.run_for(plan, 0.5) == 1


@pytest.mark.parametrize(("call_s", "run"), [(1e-5, 6), (1e-3, 6), (0.2, 1)])
def test_timed_batches_run_the_plans_run_length_unless_calls_take_milliseconds(
        monkeypatch: pytest.MonkeyPatch, call_s: float, run: int) -> None:
    # Calls of 1 ms against a batch target of 50 ms: the run length had followed the calls each batch expected (a
    # quarter of them: five in a first batch of 20 calls, one where a batch was estimated slow, each call then
    # synchronised on its own) while a fast baseline ran six. Only calls of a fifth of a second, here, run shorter runs.
    asked, timed = _timed_on_made_up_batches(monkeypatch, call_s)
    timed_batches = asked[-len(timed.batches):]
    assert {r for _, r in timed_batches} == {run}
    assert all(n_max >= timing.batch_floor(run) for n_max, _ in timed_batches)
    assert {r for _, r in asked[1:]} == {run}  # the warm-up's too, after its first call (MLX builds graphs for runs)


def test_a_gpu_pool_has_sets_for_runs_where_memory_allows() -> None:
    from ksearch.tasks import get_task

    task = get_task("gqa_decode")
    for w in task.select_workloads("gpu"):
        per_set = task.input_bytes(w) + task.output_bytes(w)
        p = timing.plan(task, w, 50 << 20, gpu=True)
        assert p.pool_sets >= min(timing.MIN_GPU_SETS, (8 << 30) // per_set)
        assert 1 <= p.run <= min(p.pool_sets, timing.RUN)


def _read_all(sock: socket.socket) -> tuple[threading.Thread, bytearray]:
    """A thread reading everything the worker sends on `sock` until it closes, into the returned buffer."""
    received = bytearray()

    def drain() -> None:
        while chunk := sock.recv(1 << 16):
            received.extend(chunk)

    reader = threading.Thread(target=drain, daemon=True)
    reader.start()
    return reader, received


def test_the_worker_times_calls_in_runs_and_commits_to_each() -> None:
    import mlx.core as mx

    from ksearch.harness import digest, protocol
    from ksearch.harness.pool import TimingPool
    from ksearch.harness.worker import Worker
    from ksearch.tasks import get_task

    mx.set_default_device(mx.cpu)
    task = get_task("softmax")
    w = task.select_workloads("cpu")[0]
    ours, theirs = socket.socketpair()
    reader, received = _read_all(theirs)
    seen: list[int] = []

    def run(x: Any) -> Any:
        seen.append(int(mx.sum(x != 0).item()))  # the run's inputs are evaluated before its clock starts
        return mx.softmax(x, axis=-1)

    worker = Worker(ours)
    worker.mx, worker._eval, worker._synchronize, worker.task = mx, mx.eval, mx.synchronize, task
    digest.capture_ops()
    worker.pool = TimingPool(task, w, 3, 4)
    worker.run, worker.params = run, dict(w.params)
    reply = worker.go({"offset": 5, "n": 10, "batch": 7, "run": 3})
    ours.close()
    reader.join(5)
    assert reply["ok"] and reply["runs"] == [3, 3, 3, 1]
    assert len(reply["times"]) == len(reply["gaps"]) == 10 and len(seen) == 10
    size = protocol.COMMIT.size
    records = [protocol.COMMIT.unpack_from(received, off) for off in range(0, len(received), size)]
    assert [r[1] for r in records[:-1]] == list(range(5, 15)) and records[-1][0] == protocol.END_MAGIC
    # Each committed fingerprint is the fingerprint of the outputs the ring holds for that call.
    held = {call: outs for call, outs in worker.ring}
    # Runs of three keep timing.RING_MIN calls (twice the run, at least twelve): all ten here.
    assert worker.ring.maxlen == timing.ring_for(3) == timing.RING_MIN and sorted(held) == list(range(5, 15))
    for magic, call, a, b in records[:-1]:
        assert magic == protocol.COMMIT_MAGIC
        if call in held:
            lanes = digest.fingerprint_mx(held[call]).tolist()
            assert (a, b) == tuple(lanes)
    # A run's calls are queued and evaluated together inside one clock: nothing between them, each the run's mean;
    # the run's last gap holds the commitments and the next run's stamps.
    gaps, times = reply["gaps"], reply["times"]
    assert all(gaps[i] == 0.0 for i in (0, 1, 3, 4, 6, 7)) and all(gaps[i] > 0 for i in (2, 5, 8))
    assert times[0] == times[1] == times[2] and times[3] == times[4] == times[5] and times[6] == times[7] == times[8]


def test_a_chained_tasks_calls_take_the_previous_output_within_a_run() -> None:
    import mlx.core as mx

    from ksearch.harness.pool import TimingPool
    from ksearch.harness.worker import Worker
    from ksearch.tasks import get_task

    mx.set_default_device(mx.cpu)
    task = get_task("gqa_decode")
    assert task.chain == ("q", 0)
    w = task.select_workloads("cpu")[0]
    ours, theirs = socket.socketpair()
    _read_all(theirs)  # the commitments the worker sends
    made: list[Any] = []
    took: list[Any] = []

    def run(q: Any, k_cache: Any, v_cache: Any, length: int) -> Any:
        took.append(q)
        made.append(q * 0.5)
        return made[-1]

    worker = Worker(ours)
    worker.mx, worker._eval, worker._synchronize, worker.task = mx, mx.eval, mx.synchronize, task
    worker.pool = TimingPool(task, w, 3, 4)
    worker.run, worker.params = run, dict(w.params)
    reply = worker.go({"offset": 0, "n": 7, "batch": 7, "run": 3})
    ours.close()
    assert reply["ok"] and reply["runs"] == [3, 3, 1]
    # The first call of each run takes its own set's query; the others the previous call's output, the same array.
    chained = [took[i] is made[i - 1] for i in range(1, 7)]
    assert chained == [True, True, False, True, True, False]
    assert all(timing.starts_run(c, 0, 3, 4) == (c in (0, 3, 6)) for c in range(7))
    assert timing.run_length(24, 4) == 4 and timing.run_length(0, 9) == 1


def test_a_chain_must_join_an_output_to_an_input_of_its_shape() -> None:
    from dataclasses import replace

    from ksearch.tasks import get_task

    task = get_task("gqa_decode")
    with pytest.raises(ValueError, match="names no input 'x'"):
        replace(task, chain=("x", 0))
    with pytest.raises(ValueError, match="no output 1"):
        replace(task, chain=("q", 1))
    with pytest.raises(ValueError, match="not shaped as input 'k_cache'"):
        replace(task, chain=("k_cache", 0))
    assert replace(task, chain=None).chain is None


def test_work_moved_between_the_calls_of_a_run_gains_at_most_the_run_bound() -> None:
    # A run's inputs are all there before its first call: a candidate computes other calls' outputs early, so four
    # calls in six look twice as fast as they are and two pay for them (each run's total is honest: 6 ms).
    run = [0.5e-3] * 4 + [2e-3] * 2
    times = run * 20
    measured = timing.combine([(sum(times), len(times), times)], runs=[[6] * 20])
    assert measured.source == "run" and measured.latency_s == pytest.approx(1e-3)
    # Without the run bound the median call (0.5 ms) would be the latency: mean = 2 x median, not over it.
    assert not timing.two_kinds(times)


def test_an_honest_run_whose_first_call_is_slower_is_timed_by_its_median_call() -> None:
    # The first call of each run follows the harness's work between runs and is 1.6x the others.
    times = ([1.6e-4] + [1e-4] * 5) * 20
    measured = timing.combine([(sum(times), len(times), times)], runs=[[6] * 20])
    assert measured.source == "worker" and measured.latency_s == pytest.approx(1e-4)


def test_the_run_length_can_be_set_for_measuring_and_every_result_says_so() -> None:
    # KSEARCH_TIMING_RUN sets the run length (on the CPU too), the ring and the GPU pools' floor, in the parent and its
    # workers alike; an evaluation under it passes and records the setting; a bad value is one line and exit 2.
    import json
    import os
    import subprocess
    import sys
    from pathlib import Path

    env = {**os.environ, "KSEARCH_TIMING_RUN": "3"}
    code = "import ksearch.harness.timing as t; print(t.RUN, t.RING, t.CPU_RUN, t.MIN_GPU_SETS, t.RUN_SETTING)"
    shown = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert shown.stdout.split() == ["3", "6", "3", "4", "3"]
    starter = Path(__file__).resolve().parents[1] / "src/ksearch/tasks/starters/softmax_cpu.py"
    cmd = [sys.executable, "-m", "ksearch.cli", "eval", "softmax", str(starter), "--backend", "mlx-cpu", "--json"]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads(done.stdout)
    assert result["status"] == "passed" and result["environment"]["timing_run"] == 3
    bad = subprocess.run(cmd, env={**os.environ, "KSEARCH_TIMING_RUN": "0"}, capture_output=True, text=True,
                         timeout=120)
    assert bad.returncode == 2
    assert bad.stderr.strip().splitlines() == ["error: KSEARCH_TIMING_RUN='0': give the most calls a timed run "
                                               "queues, 1 to 32 (unset: 24 on a GPU, 2 on the CPU)"]


def test_the_run_length_comes_from_the_calls_not_from_the_harness_work_between_them(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # Calls of 100 us with 30-80 ms of the harness's work around each (a parent's clock per call of 30-80 ms): runs
    # that followed the parent's time per call were one call long in some batches and six in others.
    rng = random.Random(3)
    asked, _ = _timed_on_made_up_batches(monkeypatch, 1e-4, lambda: rng.uniform(0.03, 0.08))
    assert {run for _, run in asked} == {6}


@pytest.mark.parametrize("slow_batch", [0, 1, 2])
def test_one_slow_warm_up_batch_does_not_shorten_the_runs(monkeypatch: pytest.MonkeyPatch, slow_batch: int) -> None:
    # Calls of 100 us, one warm-up batch's at 20 ms (a compile, a first allocation): the runs had followed the last
    # warm-up batch, so such a batch shortened them (to 7-19 calls of 24 for 0.45-1 ms calls on the H200, timed up to
    # 1.3x the plain loop). The fastest of three warm-up batches sets them.
    asked, timed = _timed_on_made_up_batches(monkeypatch, 1e-4, slow={slow_batch: 0.02})
    warm_up = asked[:len(asked) - len(timed.batches)]
    assert len(warm_up) >= 3 and len(warm_up) > slow_batch + 1  # it ends on a batch as fast as the fastest
    assert sum(min(n_max, 2 * run) for n_max, run in warm_up) >= timing.ring_for(6)  # a ring's outputs made
    assert {run for _, run in asked[-len(timed.batches):]} == {6}
    # A workload whose calls all take 20 ms still gets runs short enough for its batches (timing.run_for).
    asked, timed = _timed_on_made_up_batches(monkeypatch, 0.02)
    assert {run for _, run in asked[-len(timed.batches):]} == {timing.run_for(timing.TimingPlan(
        pool_sets=12, warmup=2, warmup_s=0.0, batches=5, target_batch_s=0.05, checks=2, run=6), 0.02)} == {2}


def test_a_warm_up_that_never_settles_ends_at_its_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    from ksearch.harness import measure

    # Every warm-up batch slower than the one before: never as fast as the fastest, so the limit ends it.
    asked, timed = _timed_on_made_up_batches(monkeypatch, 1e-4, slow={i: 1e-4 * 1.5 ** i for i in range(40)})
    assert len(asked) - len(timed.batches) == measure.WARMUP_MAX_BATCHES


def test_a_first_warm_up_batch_longer_than_the_time_limit_still_gets_the_whole_warm_up(
        monkeypatch: pytest.MonkeyPatch) -> None:
    import time

    from ksearch.harness import measure

    # A fresh worker's first call compiles for longer than the warm-up's time limit: had the limit counted from the
    # start, the warm-up would have ended on that one batch, its compile-inflated estimate giving runs of one call
    # (the H200's baselines then timed at 1.5-3.5x their plain loop).
    first = [True]

    def slow_first() -> float:
        if first[0]:
            first[0] = False
            time.sleep(0.1)
        return 0.0

    asked, timed = _timed_on_made_up_batches(monkeypatch, 1e-4, slow_first, slow={0: 0.5}, settle_s=0.05)
    assert len(asked) - len(timed.batches) >= measure.WARMUP_BATCHES
    assert {run for _, run in asked[-len(timed.batches):]} == {6}


def _timed_on_made_up_batches(monkeypatch: pytest.MonkeyPatch, call_s: float,
                              between_s: Callable[[], float] = lambda: 0.0,
                              slow: dict[int, float] | None = None,
                              settle_s: float = 0.3) -> tuple[list[tuple[int, int]], Any]:
    """measure.time_workload (softmax's first CPU workload, a plan of runs of six) on batches made up here: every call
    takes call_s by the worker's clock (slow[i] in the i-th batch) and call_s + between_s() by the parent's. Returns
    the (n_max, run) each batch was asked for, and the Timed."""
    from ksearch.harness import measure
    from ksearch.harness.batch import Batch
    from ksearch.tasks import get_task

    asked: list[tuple[int, int]] = []

    def fake_batch(worker: object, first: int, n_max: int, key: int, deadline: float, stop_at: object,
                   run: int = 1) -> Batch:
        each = (slow or {}).get(len(asked), call_s)
        asked.append((n_max, run))
        n = min(n_max, 2 * run)
        elapsed = sum(each + between_s() for _ in range(n))
        return Batch(first, key, elapsed, {"ok": True, "times": [each] * n, "gaps": [0.0] * n, "lead": 0.0,
                                           "runs": [run] * (n // run)}, ["0" * 16] * n, n)

    class Worker:
        def request(self, msg: dict, deadline: float, max_bytes: int | None = None) -> tuple[dict, dict]:
            return {"ok": True}, {}

    monkeypatch.setattr(measure, "run_batch", fake_batch)
    task = get_task("softmax")
    plan = timing.TimingPlan(pool_sets=12, warmup=2, warmup_s=0.0, batches=5, target_batch_s=0.05, checks=2, run=6,
                             settle_s=settle_s)
    timed = measure.time_workload(Worker(), task, task.select_workloads("cpu")[0], plan,  # type: ignore[arg-type]
                                  deadline=1e12, check=False, rng=random.SystemRandom())
    return asked, timed


def test_a_gpu_pool_fits_the_device_it_runs_on() -> None:
    # Pools of 24 sets: 8 GiB at most, and a sixteenth of the device's memory (the candidate's and the baseline's
    # pools, their rings and the reference worker share it). Unknown memory: the 8 GiB limit alone.
    from ksearch.tasks import get_task

    assert timing.pool_bytes(141) == timing.pool_bytes(None) == timing.pool_bytes(0) == 8 << 30
    assert timing.pool_bytes(24) == 3 << 29 and timing.pool_bytes(16) == 1 << 30
    task = get_task("rmsnorm")
    for w in task.select_workloads("gpu"):
        per_set = task.input_bytes(w) + task.output_bytes(w)
        big, small = (timing.plan(task, w, 50 << 20, gpu=True, memory_gb=m) for m in (141, 16))
        assert big.pool_sets == big.run == timing.RUN
        assert small.pool_sets * per_set <= 1 << 30 < (small.pool_sets + 1) * per_set
        assert small.run == small.pool_sets < big.run


def test_a_batch_keeps_twice_its_run_between_twelve_and_forty_eight_calls() -> None:
    # Twice the run the parent asked for, at least RING_MIN (late commitments), at most RING: a ring of 48 outputs
    # beside pools sized to a small device would outweigh the pools.
    assert [timing.ring_for(r) for r in (1, 3, 6, 7, 24, 32)] == [12, 12, 12, 14, 48, 48]
    assert timing.ring_for(timing.RUN) == timing.RING


def test_a_chained_tasks_result_records_the_chain_and_passes_an_honest_kernel(cpu_backend: Any) -> None:
    from ksearch.harness import EvalOptions, evaluate
    from ksearch.tasks import get_task

    task = get_task("gqa_decode")
    result = evaluate(task, task.starting_source("cpu"), cpu_backend,
                      EvalOptions(workloads=[task.select_workloads("cpu")[0].name], timeout_s=90.0))
    assert result.status == "passed", result.message
    assert result.environment["timing_chain"] == ["q", 0]
