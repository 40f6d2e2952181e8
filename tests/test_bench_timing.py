"""The one timing helper of the benchmarks (ksearch.bench.timing): interleaved rounds, the same number of calls for
every contender, hooks outside the clock, and the statistics the results report."""

from __future__ import annotations

import math
import time

import mlx.core as mx
import pytest

from ksearch.bench.timing import geomean, latency_stats, ratio_stats, time_rounds


def test_bench_rounds_grow_to_the_target_length_and_every_function_gets_the_same_count():
    calls = {"fast": 0, "slow": 0}

    def make(name, seconds):
        def fn():
            calls[name] += 1
            time.sleep(seconds)
            return mx.zeros((1,))
        return fn

    fns = {"fast": make("fast", 0.001), "slow": make("slow", 0.003)}
    times = time_rounds(fns, rounds=2, n=2, warmup=1, round_s=0.05)
    # warm-up 1 + probe 1 + 2 rounds of n each; n from the fastest probe: a sleep of 1 ms takes at least 1 ms, so n is
    # at most 50; a loaded machine stretches it (3 ms seen on CI), so only "grew past the given 2" is asserted below
    n = (calls["fast"] - 2) // 2
    assert 2 < n <= 50 and calls["slow"] == calls["fast"]
    assert all(len(t) == 2 for t in times.values())
    calls.update(fast=0, slow=0)
    time_rounds(fns, rounds=2, n=2, warmup=1)  # without a target: n as given
    assert calls == {"fast": 5, "slow": 5}  # warm-up 1 + 2 rounds of 2


def _recording(names: str, order: list[str]) -> dict:  # type: ignore[type-arg]
    """A contender per name, each noting its name in `order` when called."""
    def make(name: str):  # type: ignore[no-untyped-def]
        def fn():  # type: ignore[no-untyped-def]
            order.append(name)
            return mx.zeros((1,))
        return fn

    return {name: make(name) for name in names}


def test_rounds_interleave_the_contenders_in_turn_and_before_runs_outside_the_clock() -> None:
    order: list[str] = []

    def before(name: str) -> None:
        order.append(f"before {name}")
        time.sleep(0.05)  # not in the measured time

    times = time_rounds(_recording("abc", order), rounds=4, n=1, warmup=1, before=before)
    assert order[:6] == [x for name in "abc" for x in (f"before {name}", name)]  # warm-up in the given order
    timed = order[6:]
    assert timed[0::2] == [f"before {name}" for name in timed[1::2]]  # each call right after its own `before`
    rounds = [timed[1::2][i:i + 3] for i in range(0, 12, 3)]
    assert all(sorted(r) == ["a", "b", "c"] for r in rounds)  # every contender once a round
    assert all(t < 0.04 for ts in times.values() for t in ts)


def test_rounds_vary_both_place_and_neighbour() -> None:
    order: list[str] = []
    time_rounds(_recording("abcd", order), rounds=40, n=1, warmup=0)
    rounds = [order[i:i + 4] for i in range(0, 160, 4)]
    assert {r[0] for r in rounds} == set("abcd")  # no contender keeps the first place
    before_b = {r[r.index("b") - 1] for r in rounds if r.index("b") > 0}
    assert len(before_b) == 3  # nor its neighbour (a fixed cyclic order would give "a" only)
    again: list[str] = []
    time_rounds(_recording("abcd", again), rounds=40, n=1, warmup=0)
    assert [again[i:i + 4] for i in range(0, 160, 4)] != rounds  # each call draws orders of its own


def test_each_call_can_be_waited_for_and_host_code_needs_no_device(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[int] = []

    def fn():  # type: ignore[no-untyped-def]
        seen.append(len(seen))
        return mx.array([len(seen)])

    time_rounds({"each": fn}, rounds=2, n=3, warmup=0, eval_each=True)
    assert seen == list(range(6))
    # device=False: plain host calls, MLX never asked to evaluate or synchronise
    monkeypatch.setattr(mx, "eval", lambda *a: pytest.fail("mx.eval called"))
    monkeypatch.setattr(mx, "synchronize", lambda *a: pytest.fail("mx.synchronize called"))
    times = time_rounds({"host": lambda: sum(range(1000))}, rounds=3, n=4, warmup=0, device=False)
    assert len(times["host"]) == 3 and all(t > 0 for t in times["host"])


def test_statistics_are_medians_spreads_and_ratios() -> None:
    assert latency_stats([3.0, 1.0, 2.0]) == {"latency_s": 2.0, "latency_min_s": 1.0, "latency_max_s": 3.0}
    r = ratio_stats([1.0, 2.0, 1.0], [2.0, 2.0, 4.0])  # ours, base: per round 2x, 1x, 4x
    assert r == {"speedup": 2.0, "speedup_min": 1.0, "speedup_max": 4.0}
    assert math.isclose(geomean([1.0, 4.0]), 2.0) and geomean([0.0, -1.0]) == 0.0
    with pytest.raises(ValueError):
        ratio_stats([1.0], [1.0, 2.0])  # rounds pair up one to one


def test_a_stream_hands_a_step_over_and_waits_for_the_one_before_only_then(monkeypatch: pytest.MonkeyPatch) -> None:
    events: list[str] = []
    made = iter(range(1000))

    def fn():  # type: ignore[no-untyped-def]
        i = next(made)
        events.append(f"build {i}")
        return mx.array([i])

    def name(x: list) -> str:  # type: ignore[type-arg]
        return ",".join(str(a.item()) for a in x)

    real_eval = mx.eval
    monkeypatch.setattr(mx, "async_eval", lambda x: events.append(f"hand {name(x)}"))
    monkeypatch.setattr(mx, "eval", lambda x: (events.append(f"wait {name(x)}"), real_eval(x))[1])
    times = time_rounds({"s": fn}, rounds=1, n=7, warmup=0, step=3)
    assert events == ["build 0", "build 1", "build 2", "hand 0,1,2",
                      "build 3", "build 4", "build 5", "hand 3,4,5", "wait 0,1,2",
                      "build 6", "hand 6", "wait 3,4,5", "wait 6"]  # a last step of what is left
    assert len(times["s"]) == 1 and times["s"][0] > 0


@pytest.mark.parametrize("kwargs", [{"step": -1}, {"step": 2, "eval_each": True},
                                    {"step": 2, "sync_each": True}, {"step": 2, "device": False}])
def test_a_stream_needs_a_positive_step_on_the_device_and_no_per_call_waits(kwargs: dict) -> None:  # type: ignore[type-arg]
    calls: list[int] = []
    with pytest.raises(ValueError, match="step"):
        time_rounds({"s": lambda: calls.append(1)}, rounds=1, n=2, warmup=1, **kwargs)
    assert calls == []  # refused before anything ran
