"""A decode call's time in a stream, driven in different ways: does the host's work a call hide under the device's?

Under Nsight Compute (one kernel at a time) the tensor-core decode's kernel and cuDNN's take the same time at B 16,
16k (`ncu-decode-b16-*` in benchmarks/results/logs), yet in `decode_power.py`'s stream (ten calls queued before each
evaluation) ours take 30% longer. Per shape and contender (MLX's attention on the cache slices, the library decode,
the configurations given), the time a call in a sustained stream under each way of driving it:

    queued:N   N calls built, then one evaluation of all N (decode_power.py's stream is queued:10)
    async:N    each call handed to the device as it is built (mx.async_eval), at most N in flight; the host builds
               the next call while the device runs the ones before
    steps:N    N calls handed to the device at once, the next N built while the device runs them (a model's generate
               loop, a step a token of N layers; `ksearch bench decode`'s stream: bench.timing.stream_steps)

and, as a floor from the host's side, build:N: the time a call only to build N calls' graphs (nothing evaluated).
The modes run in turn, twice, and the better round is kept. `--pieces` adds what a call is made of as contenders of
their own: the library's split kernel without its merge, each tensor-core configuration's kernel without it, the
merge alone (on partials made once) and MLX's slice of K. `--timeline N` records, per contender, N bursts of each
queued, async and steps mode through CUPTI (torch's profiler, which traces every kernel in the process, MLX's
included) and splits a call's time into the device's kernels (each kernel's median) and the device's idle time
between them;
the first kernels as recorded show whether calls overlapped. By default the calls are independent (the same inputs
each call; MLX's graphs let queued ones run side by side); `--chained` makes each call's query the previous call's
output and reads caches in turn, as `ksearch bench decode` does (bench.attention.chained).

    python benchmarks/decode_stream.py OUT_DIR [--shapes 16x16384,1x4096] [--seconds 0.5]
                                       [--modes queued:1,queued:10,queued:100,async:2,async:8,steps:8,build:10]
                                       [--pieces] [--configs mma:producers=0,consumers=4,slots=3 ...]
                                       [--timeline ROUNDS] [--chained]

Hq 32, Hkv 8, D 128, fp16, capacity = length + 256. Writes decode-stream-*.json to OUT_DIR.
"""

from __future__ import annotations

import argparse
import importlib.util
import itertools
import time
from collections import deque
from collections.abc import Callable
from typing import Any

from ksearch.bench.timing import stream_steps

MODES = ("queued", "async", "steps", "build")


def parse_modes(text: str) -> list[tuple[str, int]]:
    """`queued:10,async:2` -> [("queued", 10), ("async", 2)]; ValueError naming the part it cannot read."""
    out = []
    for part in (p for p in text.split(",") if p):
        kind, _, n = part.partition(":")
        if kind not in MODES or not n.isdigit() or int(n) < 1:
            raise ValueError(f"mode {part!r}: write MODE:N with MODE one of {', '.join(MODES)} and N >= 1")
        out.append((kind, int(n)))
    if not out:
        raise ValueError("no mode given")
    return out


def make_burst(fn: Callable[[], Any], mode: tuple[str, int]) -> Callable[[], int]:
    """A burst of calls of `fn` driven as `mode`; the burst returns how many calls it made."""
    import mlx.core as mx

    kind, n = mode

    def burst() -> int:
        if kind == "steps":
            stream_steps(fn, 4 * n, n)
            return 4 * n
        if kind == "queued":
            mx.eval([fn() for _ in range(n)])
            return n
        if kind == "build":
            outs = [fn() for _ in range(n)]
            del outs
            return n
        flight: deque[Any] = deque()
        for _ in range(max(4 * n, 32)):
            out = fn()
            mx.async_eval(out)
            flight.append(out)
            if len(flight) > n:
                mx.eval(flight.popleft())
        mx.eval(list(flight))
        return max(4 * n, 32)

    return burst


def per_call(fn: Callable[[], Any], mode: tuple[str, int], seconds: float) -> float:
    """Seconds a call of `fn` in a stream driven as `mode`, over about `seconds` after one warm pass."""
    import mlx.core as mx

    burst = make_burst(fn, mode)
    burst()
    mx.synchronize()
    t0, calls = time.perf_counter(), 0
    while time.perf_counter() - t0 < seconds:
        calls += burst()
    if mode[0] != "build":
        mx.synchronize()
    return (time.perf_counter() - t0) / calls


def summarize_timeline(kernels: list[tuple[str, float, float]], calls: int) -> dict[str, Any]:
    """Kernel intervals (name, start, end in us) of `calls` calls -> a call's span (first start to last end, over
    calls), the device's busy time a call (the union of the intervals), its idle time a call, and per kernel name
    the launches a call and the median duration."""
    import statistics

    if not kernels or calls < 1:
        raise ValueError("no kernels recorded: the profiler saw none of the calls' kernels")
    kernels = sorted(kernels, key=lambda k: k[1])
    busy, run_start, run_end = 0.0, kernels[0][1], kernels[0][2]
    for _, start, end in kernels[1:]:
        if start > run_end:
            busy += run_end - run_start
            run_start, run_end = start, end
        else:
            run_end = max(run_end, end)
    busy += run_end - run_start
    span = max(k[2] for k in kernels) - kernels[0][1]
    by_name: dict[str, list[float]] = {}
    for name, start, end in kernels:
        by_name.setdefault(name, []).append(end - start)
    t0 = kernels[0][1]
    return {"span_us": span / calls, "busy_us": busy / calls, "idle_us": (span - busy) / calls,
            # the first kernels as recorded (name, start from the first, duration): where the idle time falls
            "first": [(name[:60], start - t0, end - start) for name, start, end in kernels[:40]],
            "kernels": {name: {"per_call": len(d) / calls, "median_us": statistics.median(d)}
                        for name, d in sorted(by_name.items(), key=lambda kv: -sum(kv[1]))}}


def trace_mode(fn: Callable[[], Any], mode: tuple[str, int], rounds: int) -> dict[str, Any]:
    """`rounds` bursts of calls driven as `mode` (per_call's) under CUPTI (torch's profiler): summarize_timeline of
    their kernels."""
    import mlx.core as mx
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    burst = make_burst(fn, mode)
    burst()
    mx.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        calls = sum(burst() for _ in range(rounds))
        mx.synchronize()
    kernels = [(e.name, e.time_range.start, e.time_range.end) for e in prof.events()
               if e.device_type == DeviceType.CUDA and e.time_range.end > e.time_range.start]
    return summarize_timeline(kernels, calls)


def contenders(q: Any, kc: Any, vc: Any, length: int, configs: list[Any], pieces: bool = False,
               caches: list[tuple[Any, Any]] | None = None) -> dict[str, Callable[[], Any]]:
    """Native, the library and each configuration; with `pieces`, also what a call is made of: the library's split
    kernel without its merge, each tensor-core configuration's kernel without it, the merge alone (on partials made
    once) and MLX's slice of K. With `caches`, the whole calls are chained (bench.attention.chained): each call's
    query the previous call's output, the caches read in turn."""
    import mlx.core as mx

    from ksearch.bench.attention import chained
    from ksearch.kernels.decode import decode, native_decode
    from ksearch.kernels.decode.cuda_cluster import ClusterConfig, mma_partials
    from ksearch.kernels.decode.cuda_split_k import launch_for, merge_partials, split_partials

    whole: dict[str, Callable[[Any, Any, Any], Any]] = {
        "native": lambda q, k, v: native_decode(q, k, v, length), "library": lambda q, k, v: decode(q, k, v, length)}
    for cfg in configs:
        whole[repr(cfg)] = lambda q, k, v, c=cfg: decode(q, k, v, length, config=c)
    calls: dict[str, Callable[[], Any]] = {
        name: chained(fn, q, caches) if caches else (lambda fn=fn: fn(q, kc, vc)) for name, fn in whole.items()}
    if pieces:
        launch = launch_for(q, kc, vc)
        assert launch is not None, "the library's split-K kernel does not take these shapes"
        calls["library split kernel alone"] = lambda: split_partials(launch, q, kc, vc, length)[0]
        parts = split_partials(launch, q, kc, vc, length)
        mx.eval(parts)
        calls["merge alone"] = lambda: merge_partials(parts[0], parts[1], q)
        calls["slice of K"] = lambda: kc[:, :, :length]
        for cfg in configs:
            if isinstance(cfg, ClusterConfig) and not cfg.cluster:
                calls[f"{cfg!r} kernel alone"] = lambda c=cfg: mma_partials(q, kc, vc, length, c)[0]
    return calls


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out", help="directory for decode-stream-*.json")
    ap.add_argument("--shapes", default="16x16384,1x4096", help="BxLENGTH,...")
    ap.add_argument("--seconds", type=float, default=0.5, help="stream per contender, mode and round")
    ap.add_argument("--modes", default="queued:1,queued:10,queued:100,async:2,async:8,build:10")
    ap.add_argument("--pieces", action="store_true",
                    help="also each kernel without its merge, the merge alone and MLX's slice of K")
    ap.add_argument("--configs", nargs="*", default=["mma:producers=0,consumers=4,slots=3"],
                    help="configurations besides the library's: split-K's (ring=0) or `mma[:FIELD=VALUE,...]`")
    ap.add_argument("--chained", action="store_true",
                    help="each call's query the previous call's output, caches read in turn (as `bench decode`)")
    ap.add_argument("--timeline", type=int, default=0, metavar="ROUNDS",
                    help="also trace ROUNDS rounds of the first queued mode per contender (CUPTI, through torch)")
    args = ap.parse_args()
    from ksearch.bench.attention import decode_caches, decode_inputs, parse_batch_lengths
    from ksearch.kernels.decode import parse_config

    try:
        shapes = parse_batch_lengths(args.shapes)
        modes = parse_modes(args.modes)
        configs = [parse_config(c) for c in args.configs]
    except ValueError as exc:
        raise SystemExit(f"decode_stream: {exc} (shapes as 16x16384, modes as queued:10,async:2, "
                         "configurations as ring=0 or mma:consumers=4)") from None
    if not args.seconds > 0:
        raise SystemExit(f"decode_stream: --seconds {args.seconds}: give a positive stream length")
    if args.chained and args.pieces:
        raise SystemExit("decode_stream: --pieces times parts whose outputs are not a query; drop --chained for them")
    traced = [m for m in modes if m[0] != "build"]
    if args.timeline < 0 or (args.timeline and not traced):
        raise SystemExit("decode_stream: --timeline ROUNDS takes ROUNDS >= 1 and a queued, async or steps mode to trace")
    if args.timeline and importlib.util.find_spec("torch") is None:
        raise SystemExit("decode_stream: --timeline reads CUPTI through torch's profiler: install torch, or drop it")
    import mlx.core as mx

    from ksearch.backends import get_backend
    from ksearch.bench.results import make_result, write_result

    if not mx.cuda.is_available():
        raise SystemExit("decode_stream: MLX here has no CUDA device; run this on the CUDA machine")
    figures = []
    for b, length in shapes:
        shape = {"B": b, "Hq": 32, "Hkv": 8, "D": 128, "capacity": length + 256, "dtype": "float16"}
        q, kc, vc = decode_inputs(shape)
        kv = 2 * b * 8 * length * 128 * 2
        calls = contenders(q, kc, vc, length, configs, args.pieces,
                           decode_caches(shape, kc, vc) if args.chained else None)
        best: dict[tuple[str, str], float] = {}
        for _ in range(2):  # rounds in turn, so that a slow stretch of the machine falls on every contender alike
            for name, fn in calls.items():
                for mode in modes:
                    key = (name, f"{mode[0]}:{mode[1]}")
                    best[key] = min(best.get(key, float("inf")), per_call(fn, mode, args.seconds))
        for (name, label), t in best.items():
            figures.append({"B": b, "length": length, "contender": name, "mode": label, "per_call_s": t,
                            "tbs": None if label.startswith("build") else kv / t / 1e12})
            print(f"{b:>2} {length:>6} {name[:48]:<48} {label:<11} {t * 1e6:8.1f} us", flush=True)
        for (name, fn), mode in itertools.product(calls.items(), traced if args.timeline else ()):
            tl = trace_mode(fn, mode, args.timeline)
            label = f"{mode[0]}:{mode[1]}"
            figures.append({"B": b, "length": length, "contender": name, "mode": f"timeline {label}", **tl})
            top = ", ".join(f"{k[:40]} {v['median_us']:.1f} us x{v['per_call']:.2g}" for k, v in
                            list(tl["kernels"].items())[:3])
            print(f"{b:>2} {length:>6} {name[:40]:<40} {label:<9} span {tl['span_us']:7.1f} busy {tl['busy_us']:7.1f} "
                  f"idle {tl['idle_us']:6.1f} us a call; {top}", flush=True)
    data = make_result("decode-stream-chained" if args.chained else "decode-stream", get_backend("mlx-cuda"),
                       figures, [list(s) for s in shapes], ["float16"],
                       notes=f"the better of two rounds of {args.seconds} s per contender and mode; build:N times "
                             "building the calls' graphs only" + ("; calls chained" if args.chained else ""))
    print(write_result(data, args.out), flush=True)


if __name__ == "__main__":
    main()
