"""The one timing helper of the benchmarks: contenders timed side by side in one process, reported as medians with
their spread, and compared as ratios.

`time_rounds` runs every contender once per round, in turn (interleaved, so that drift of clocks, temperature or
other load hits all of them alike; each round in an order of its own, drawn at random): each round times `n`
calls of one contender from a synchronised start until their outputs are evaluated and the device is synchronised
again, divided by n. On MLX, a call only builds a graph: `mx.eval` runs it and `mx.synchronize` waits for the device,
so both are inside the clock. Host-side code (numpy) times with `device=False`. With `step`, the calls are handed
to the device a step of calls at a time instead, the next built while the device runs them (a stream, as a model's
generate loop hands each token's layers over).
"""

from __future__ import annotations

import math
import random
import statistics
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any

# One generator for the whole process, seeded: every round of every call gets an order of its own (the same seed at
# every shape would put the same contender first in the same rounds everywhere), and a run is repeatable.
_ORDER = random.Random(0)


def _evaluate(outs: Any) -> None:
    import mlx.core as mx

    mx.eval(outs)


def _synchronize() -> None:
    import mlx.core as mx

    mx.synchronize()


def stream_steps(fn: Callable[[], Any], n: int, step: int) -> None:
    """n calls of `fn` handed to the device `step` calls at a time (one `mx.async_eval` a step), each step waited for
    only once the next one is handed over: the host builds a step while the device runs the one before, as mlx-lm's
    generate loop builds a token's layers while the device runs the token before."""
    import mlx.core as mx

    before: list[Any] = []
    for start in range(0, n, step):
        outs = [fn() for _ in range(min(step, n - start))]
        mx.async_eval(outs)
        if before:
            mx.eval(before)
        before = outs
    mx.eval(before)


def time_rounds(fns: Mapping[str, Callable[[], Any]], rounds: int, n: int = 1, *, warmup: int = 2,
                round_s: float = 0.0, eval_each: bool = False, before: Callable[[str], Any] | None = None,
                device: bool = True, sync_each: bool = False, step: int = 0) -> dict[str, list[float]]:
    """Seconds per call of each contender, one value per round: {name: [round 1, round 2, ...]}.

    warmup: untimed calls of each contender first (they absorb JIT compiles and allocations).
    round_s > 0: raise n (up to 64) so that a round of the fastest contender lasts about that long; the same n for
      every contender. A round ends in one eval and one synchronize (tens of microseconds), which at n = 2 was a third
      of a 0.2 ms call and made the ratio at small shapes swing 0.4x-2x from round to round.
    eval_each: evaluate every call's output before the next call (the latency of a call that is waited for), instead
      of all n outputs at the end of the round (calls queued back to back); sync_each: and synchronise the device
      after each (what the harness's timed calls do).
    before: called with a contender's name before each of its rounds and warm-ups, outside the clock (switching a
      patch on or off, preparing a state the call starts from).
    device: False for host-side code: no MLX evaluation or synchronisation.
    step > 0: a round's n calls as a stream of steps (`stream_steps`): `step` calls handed to the device at once, the
      next step built while the device runs them. Queued all at once (the default), a round's graphs are built
      before any of them runs, so the host's building of every call adds to the device's time; in a stream it hides
      under the step before, as in mlx-lm's generate loop (`mx.async_eval` of a token's step before the token
      before is waited for)."""
    if step < 0 or (step and (not device or eval_each or sync_each)):
        raise ValueError("step: a count >= 1 of calls on the device, without eval_each, sync_each or device=False")
    evaluate = _evaluate if device else (lambda _outs: None)
    synchronize = _synchronize if device else (lambda: None)

    def prepare(name: str) -> None:
        if before is not None:
            before(name)

    for name, fn in fns.items():
        if warmup > 0:
            prepare(name)
        for _ in range(warmup):
            evaluate(fn())
    synchronize()
    if round_s > 0:
        fastest = math.inf
        for name, fn in fns.items():
            prepare(name)
            t0 = time.perf_counter()
            evaluate(fn())
            synchronize()
            fastest = min(fastest, time.perf_counter() - t0)
        n = max(n, min(64, math.ceil(round_s / fastest)))
    times: dict[str, list[float]] = {k: [] for k in fns}
    names = list(fns)
    for _ in range(rounds):
        # Each round in an order of its own: with a fixed order the dispatch, timed first in every round, measured its
        # own kernel named later 1.3-2.7% slower (geomean over 96 shapes, 5 runs); rotated, each contender kept its
        # neighbours (the one before it in every round but one) and the gap stayed at 1.9%; in random orders it was
        # 1.6%, shrinking with the call's length (2.9% at L=2048, 0.4% at 8192): the dispatch's host time, since cut.
        order = names[:]
        _ORDER.shuffle(order)
        for name in order:
            fn = fns[name]
            prepare(name)
            synchronize()
            t0 = time.perf_counter()
            if step:
                stream_steps(fn, n, step)
            elif eval_each or sync_each:
                for _ in range(n):
                    evaluate(fn())
                    if sync_each:
                        synchronize()
            else:
                evaluate([fn() for _ in range(n)])
            if not sync_each:  # with sync_each the device is idle already: a second synchronise is not the call's
                synchronize()
            times[name].append((time.perf_counter() - t0) / n)
    return times


def build_us(fn: Callable[[], Any], n: int = 2000) -> float:
    """Microseconds of host time a call of `fn` takes to build its graph, nothing evaluated: n calls, their outputs
    kept alive (freeing them would be timed too). What a small call costs where calls queue faster than the host
    makes them."""
    keep = []
    t0 = time.perf_counter()
    for _ in range(n):
        keep.append(fn())
    return (time.perf_counter() - t0) / n * 1e6


def chained_calls(fn: Callable[..., Any], inputs: Iterator[dict[str, Any]], name: str, index: int = 0,
                  params: Mapping[str, Any] | None = None) -> Callable[[], Any]:
    """Calls of `fn` (with `params` as keywords) on the input sets in turn, each after the first taking the previous call's output `index` (the
    output itself where it is one array) as its input `name`: calls that wait for each other on the device, as a
    model's layers do (Task.chain; `bench decode`'s chained calls)."""
    last: list[Any] = []

    def call() -> Any:
        x = dict(next(inputs))
        if last:
            x[name] = last.pop()
        out = fn(**x, **(params or {}))
        last.append(out[index] if isinstance(out, (tuple, list)) else out)
        return out

    return call


def latency_stats(times: list[float]) -> dict[str, float]:
    """The median of a contender's rounds and their spread (the fastest and the slowest round), in seconds."""
    return {"latency_s": statistics.median(times), "latency_min_s": min(times), "latency_max_s": max(times)}


def ratio_stats(ours: list[float], base: list[float]) -> dict[str, float]:
    """How many times faster `ours` is than `base`: the ratio of the medians, and the spread of the per-round ratios
    (rounds are interleaved, so round i of both ran at about the same time)."""
    per_round = [b / o for o, b in zip(ours, base, strict=True)]
    return {"speedup": statistics.median(base) / statistics.median(ours), "speedup_min": min(per_round),
            "speedup_max": max(per_round)}


def geomean(xs: list[float]) -> float:
    """The geometric mean of the positive values (0 when there are none): how ratios over shapes are summarised."""
    xs = [x for x in xs if x > 0]
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else 0.0
