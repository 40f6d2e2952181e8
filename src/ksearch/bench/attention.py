"""The suites behind `ksearch bench attention` and `ksearch bench decode`: our kernels vs MLX's native attention.

Per shape, in one process (bench.timing.time_rounds): warm both up (this absorbs JIT compiles), then R rounds that
each time `n` calls of ours and `n` calls of native back to back (interleaved, so drift hits both alike; each round
in an order drawn at random); a round's time is the wall clock of the n calls plus one `mx.eval` and
`mx.synchronize`, divided by n; prefill raises n until a round lasts about 10 ms. We report the median over rounds,
the spread (min/max ratio across rounds) and, from the median, TFLOP/s, GB/s and the fraction of the roofline.
Decode's calls are chained by default (`chained`): each call's query is the previous call's output, as in a model's
layers, so no two calls of a round run side by side on the device. Prefill's are independent by default (the same
inputs every call: MLX's CUDA graphs order kernels only by the arrays they pass, so a call's first blocks may start
while the one before finishes its last); `calls="chained"` chains them as decode does, each call's query the previous
call's output (whose entries are small: after the first call the scores are near zero, alike for both sides).
"""

from __future__ import annotations

import itertools
import math
import statistics
from collections.abc import Callable, Sequence
from functools import partial
from pathlib import Path
from typing import Any, cast

from ksearch.bench.timing import chained_calls, geomean, ratio_stats, time_rounds

# H200 ceilings for the roofline fractions: HBM bandwidth and dense fp16/bf16 tensor rate (datasheet).
HBM_BYTES_PER_S = 4.3e12
TENSOR_FLOPS = 989e12


def parse_batch_lengths(text: str) -> list[tuple[int, int]]:
    """`16x16384,1x4096` -> [(16, 16384), (1, 4096)], as the decode scripts take shapes; ValueError naming the part it
    cannot read."""
    out = []
    for part in text.split(","):
        try:
            b, length = (int(x) for x in part.split("x"))
        except ValueError:
            raise ValueError(f"shape {part!r}: write BxLENGTH, e.g. 16x16384") from None
        if b < 1 or length < 1:
            raise ValueError(f"shape {part!r}: batch and length must be positive")
        out.append((b, length))
    return out


def decode_shapes(full: bool = True) -> list[dict[str, Any]]:
    out = []
    for b, length in itertools.product((1, 8, 16), (4096, 16384, 32768)):
        out.append({"B": b, "Hq": 32, "Hkv": 8, "D": 128, "length": length, "capacity": length + 256,
                    "dtype": "float16"})
    if full:
        out += [{"B": 8, "Hq": 32, "Hkv": 8, "D": 128, "length": 16000, "capacity": 16640, "dtype": "bfloat16"},
                {"B": 4, "Hq": 32, "Hkv": 8, "D": 64, "length": 8192, "capacity": 8448, "dtype": "float16"}]
    return out


PREFILL_DTYPES = ("float16", "bfloat16")  # the benchmark's set, which the targets are stated over
BENCH_DTYPES = (*PREFILL_DTYPES, "float32")  # what `--dtypes` may name


def prefill_shapes(full: bool = False, dtypes: Sequence[str] = PREFILL_DTYPES) -> list[dict[str, Any]]:
    """full: the 96 benchmark shapes (B 1/4, Hkv 8/32, fp16/bf16, D 64/128, L 2048/4096/8192, causal or not).
    default: the same grid with B=1 only plus B=4 at fp16 (a representative subset that runs in about a minute).
    dtypes: the grid at these dtypes instead (float32: the same shapes, 48 in full, 24 by default)."""
    out = []
    for b, hkv, dt, d, length, causal in itertools.product((1, 4), (8, 32), dtypes, (64, 128), (2048, 4096, 8192),
                                                         (False, True)):
        if not full and b == 4 and (dt != "float16" or hkv == 32):
            continue
        out.append({"B": b, "Hq": 32, "Hkv": hkv, "D": d, "L": length, "S": length, "dtype": dt, "causal": causal})
    return out


def prefill_dtypes(names: Sequence[str]) -> tuple[str, ...]:
    """The dtypes named (the benchmark's own without any); ValueError in one line for one it does not take."""
    bad = [n for n in names if n not in BENCH_DTYPES]
    if bad:
        raise ValueError(f"dtype {bad[0]!r} is not one the benchmark takes: name one or more of "
                         f"{', '.join(BENCH_DTYPES)}")
    return tuple(dict.fromkeys(names)) or PREFILL_DTYPES


def _dtype(name: str) -> Any:
    import mlx.core as mx

    return getattr(mx, name)


def decode_inputs(shape: dict[str, Any], seed: int = 0) -> tuple[Any, Any, Any]:
    """q (B, Hq, 1, D) and K / V caches (B, Hkv, capacity, D) for a decode shape, seeded, evaluated."""
    import mlx.core as mx

    dt = _dtype(shape["dtype"])
    b, hq, hkv, d, cap = (shape[k] for k in ("B", "Hq", "Hkv", "D", "capacity"))
    mx.random.seed(seed)
    q = mx.random.normal((b, hq, 1, d)).astype(dt)
    kc = mx.random.normal((b, hkv, cap, d)).astype(dt)
    vc = mx.random.normal((b, hkv, cap, d)).astype(dt)
    mx.eval(q, kc, vc)
    return q, kc, vc


#: A chained stream reads caches of this many bytes in turn (the H200's L2 holds 50 MB): a model's layers each read
#: a cache of their own, so a stream that read one small cache again and again would time the L2, not the HBM.
ROTATE_BYTES = 256 * 2**20

#: How bench decode's calls follow each other: "chained" (the default) or "independent".
CALLS = ("chained", "independent")


def decode_caches(shape: dict[str, Any], kc: Any, vc: Any) -> list[tuple[Any, Any]]:
    """(K, V) caches of `shape` to read in turn, kc / vc first: as many as make ROTATE_BYTES (one where it alone
    does)."""
    copies = max(1, math.ceil(ROTATE_BYTES / (kc.nbytes + vc.nbytes)))
    return [(kc, vc)] + [decode_inputs(shape, seed)[1:] for seed in range(1, copies)]


def chained(call: Callable[[Any, Any, Any], Any], q: Any, caches: Sequence[tuple[Any, Any]]) -> Callable[[], Any]:
    """`call(q, k_cache, v_cache)` as a stream of dependent calls: each call's query is the previous call's output
    (same shape and dtype) and the caches are read in turn, as a model's next layer waits for this one and reads its
    own cache (timing.chained_calls). Independent calls queued together may run side by side on the device: MLX puts
    them in one CUDA graph without an edge between them, and two of cuDNN's calls at B 16, 16k then read the same
    cache at once, two calls in 358 us (6.0 TB/s of K/V counted, above HBM's peak;
    benchmarks/results/decode-stream-timeline-*.json)."""
    sets = itertools.cycle([{"q": q, "k_cache": kc, "v_cache": vc} for kc, vc in caches])
    return chained_calls(lambda q, k_cache, v_cache: call(q, k_cache, v_cache), sets, "q")


#: bench_decode_shape's `config` for split-K in the library's configuration at every shape (where the dispatch would
#: give a call to the tensor-core kernel, too).
SPLIT_K = "split_k"


#: A decode stream's round: STREAM_CALLS calls handed to the device STREAM_STEP at a time (bench_decode_shape's
#: `stream`), as a model's generate loop hands over a token's layers (mlx-lm: 24-80 of them) while the token before
#: runs. A round starts with its first step built before anything runs (about 8 x 35 us of host time) and ends in a
#: synchronisation, which a generate loop does once a generation: 360-550 us of an idle device between a stream's
#: rounds (traced on an H100; decode-stream-chained-steps-*.json), 1.4-2.1 us a call over 256 calls.
STREAM_CALLS, STREAM_STEP = 256, 8


def bench_decode_shape(shape: dict[str, Any], rounds: int = 15, n: int = 10, config: Any = None,
                       calls: str = "chained", stream: bool = False) -> dict[str, Any]:
    """calls: "chained" (each call's query the previous call's output, caches read in turn: `chained`) or
    "independent" (the same query and cache every call; calls queued together may overlap on the device).

    The row's latencies are rounds of n calls queued at once (the host's building of all n before any runs is in
    them). stream: also time every contender in rounds of STREAM_CALLS calls handed to the device STREAM_STEP at a
    time, the next step built while the device runs the one before (time_rounds' step), as a model's generate loop
    runs: the row's stream_* fields, the same contenders and the same faster-of-two native."""
    import mlx.core as mx

    from ksearch.kernels.decode import decode, decode_config, decode_plan, native_decode

    if calls not in CALLS:
        raise ValueError(f"calls={calls!r}: use one of {', '.join(CALLS)}")
    dt = _dtype(shape["dtype"])
    b, hkv, d, length = (shape[k] for k in ("B", "Hkv", "D", "length"))
    q, kc, vc = decode_inputs(shape)
    if config == SPLIT_K:
        config = decode_config(q, kc, length)
    caches = decode_caches(shape, kc, vc) if calls == "chained" else [(kc, vc)]

    def native_contig(q: Any, kc: Any, vc: Any) -> Any:
        k = mx.contiguous(kc[:, :, :length])
        v = mx.contiguous(vc[:, :, :length])
        return mx.fast.scaled_dot_product_attention(q, k, v, scale=1.0 / math.sqrt(d))

    contenders: dict[str, Callable[[Any, Any, Any], Any]] = {
        "ours": lambda q, kc, vc: decode(q, kc, vc, length, config=config),
        "native_slice": lambda q, kc, vc: native_decode(q, kc, vc, length),
        "native_contiguous": native_contig}

    def timed() -> dict[str, Callable[[], Any]]:  # fresh chains: each starts from q and the first cache
        return {name: chained(call, q, caches) if calls == "chained" else partial(call, q, kc, vc)
                for name, call in contenders.items()}

    t = time_rounds(timed(), rounds, n)
    handed = time_rounds(timed(), rounds, STREAM_CALLS, step=STREAM_STEP) if stream else None
    caches.clear()  # the rotated copies freed before the check below (kc, vc stay)
    base = _faster_native(t)
    med = statistics.median(t["ours"])
    kv_bytes = 2 * b * hkv * length * d * dt.size
    stream_fields = {} if handed is None else _stream_fields(handed, kv_bytes)
    err = cast(float, mx.max(mx.abs(decode(q, kc, vc, length, config=config).astype(mx.float32)
                                    - native_decode(q, kc, vc, length).astype(mx.float32))).item())
    return {**shape, "latency_s": med, "native_latency_s": statistics.median(t[base]), "native_variant": base,
            "native_slice_latency_s": statistics.median(t["native_slice"]),
            "native_contiguous_latency_s": statistics.median(t["native_contiguous"]),
            **ratio_stats(t["ours"], t[base]), "kv_bytes": kv_bytes, "gbs": kv_bytes / med / 1e9,
            "native_gbs": kv_bytes / statistics.median(t[base]) / 1e9, "roofline_fraction": kv_bytes / med / HBM_BYTES_PER_S,
            "max_abs_diff_vs_native": err, "config": repr(config), "calls": calls,
            "kernel": decode_plan(q, kc, vc, length, config=config)[0], **stream_fields}


def _faster_native(t: dict[str, list[float]]) -> str:
    """The task's native baseline keeps the faster of the two ways of calling MLX per shape; so do we."""
    return min(("native_slice", "native_contiguous"), key=lambda k: statistics.median(t[k]))


def _stream_fields(t: dict[str, list[float]], kv_bytes: int) -> dict[str, Any]:
    """A decode row's stream_* fields from the stream's rounds of ours and the two natives (the faster one kept)."""
    base = _faster_native(t)
    ours, native = statistics.median(t["ours"]), statistics.median(t[base])
    ratio = ratio_stats(t["ours"], t[base])
    return {"stream_latency_s": ours, "native_stream_latency_s": native, "native_stream_variant": base,
            "stream_speedup": ratio["speedup"], "stream_speedup_min": ratio["speedup_min"],
            "stream_speedup_max": ratio["speedup_max"], "stream_gbs": kv_bytes / ours / 1e9,
            "native_stream_gbs": kv_bytes / native / 1e9}


# A row's maximum score grows about RISE units of exp2 per 64 keys in `rising` inputs: around the 2^8 (8 units) up to
# which the conditional rescale keeps a row's old maximum, so some tiles rescale O and others do not.
RISE = 8.0
# `stepped` inputs: every row's scores STEP units of exp2 higher from key STEP_AT on than before it (after a row's
# first 64- or 128-key tile): within the 2^8 the conditional rescale keeps, past what a lane's sum of P may hold under
# the exponentials ahead of the maximum (`_xa`), so the first tile past the step runs again.
STEP, STEP_AT = 6.0, 128
SCORES = ("random", "rising", "stepped")


def prefill_inputs(q_shape: tuple[int, ...], kv_shape: tuple[int, ...], dtype: Any,
                   scores: str = "random") -> tuple[Any, Any, Any]:
    """q (B, Hq, L, D), k / v (B, Hkv, S, D), seeded and evaluated. `random`: standard normal entries, whose row maxima
    settle within the first tiles (the online softmax then rarely rescales O). `rising`: positive queries and keys
    drifting along the key axis, so that each row's maximum keeps growing, by about RISE units of exp2 a 64-key tile
    (the scores' scale 1 / sqrt(D) included) and to the last key, where the causal mask lets it. `stepped`: positive
    queries and keys raised from key STEP_AT on, so that every row's scores there sit about STEP units higher."""
    import mlx.core as mx

    if scores not in SCORES:
        raise ValueError(f"scores {scores!r}: use one of {', '.join(SCORES)}")
    mx.random.seed(0)
    q = mx.random.normal(q_shape)
    k = mx.random.normal(kv_shape)
    v = mx.random.normal(kv_shape)
    if scores != "random":
        d, s = q_shape[-1], kv_shape[2]
        q = mx.abs(q)  # q . 1 is about 0.8 D: a drift along 1 raises every row's scores alike
        unit = 1 / math.log2(math.e) / (0.8 * math.sqrt(d))  # one unit of exp2, natural, through q . k / sqrt(D)
        keys = mx.arange(s, dtype=mx.float32)
        raise_by = RISE / 64 * keys if scores == "rising" else mx.where(keys >= STEP_AT, STEP, 0.0)
        k = k + (unit * raise_by).reshape(1, 1, s, 1)
    q, k, v = (x.astype(dtype) for x in (q, k, v))
    mx.eval(q, k, v)
    return q, k, v


def bench_prefill_shape(shape: dict[str, Any], rounds: int = 7, n: int = 2, config: Any = None,
                        round_s: float = 0.01, configs: Sequence[str] = (), calls: str = "independent") -> dict[str, Any]:
    """configs: configuration names (a wgmma configuration, wgmma_ws.parse_config, a Metal kernel such as
    metal_fragments, or a variant of the dispatch such as dispatch-r1: kernels.attention.parse_prefill_config) timed
    beside the dispatch and native in the same rounds, so that a dispatch rule can be read off one process; each lands
    in the row's "configs". calls: "independent" (the same q every call) or "chained" (each call's q the previous
    call's output; `prefill_calls`)."""
    import mlx.core as mx

    from ksearch.kernels.attention import attention, native_attention, parse_prefill_config, prefill_plan

    dt = _dtype(shape["dtype"])
    b, hq, hkv, d, length, s, causal = (shape[k] for k in ("B", "Hq", "Hkv", "D", "L", "S", "causal"))
    q, k, v = prefill_inputs((b, hq, length, d), (b, hkv, s, d), dt)
    dispatched = prefill_plan(q, k, v, causal, config=config)[0]
    chosen = {name: shape_config(parse_prefill_config(name), dispatched) for name in configs}

    def run(cfg: Any) -> Callable[..., Any]:  # a variant with no kernel at this shape: MLX's attention, named so
        return partial(native_attention, causal=causal) if cfg is NO_KERNEL else partial(attention, causal=causal,
                                                                                         config=cfg)

    fns: dict[str, Callable[[], Any]] = {
        "ours": prefill_calls(partial(attention, causal=causal, config=config), q, k, v, calls),
        "native": prefill_calls(partial(native_attention, causal=causal), q, k, v, calls)}
    for name, cfg in chosen.items():
        fns[f"config:{name}"] = prefill_calls(run(cfg), q, k, v, calls)
    t = time_rounds(fns, rounds, n, round_s=round_s)
    flops = 4.0 * b * hq * length * s * d / (2 if causal else 1)
    med, nmed = statistics.median(t["ours"]), statistics.median(t["native"])
    reference = native_attention(q, k, v, causal).astype(mx.float32)

    def max_diff(out: Any) -> float:
        return cast(float, mx.max(mx.abs(out.astype(mx.float32) - reference)).item())

    row = {**shape, "latency_s": med, "native_latency_s": nmed, **ratio_stats(t["ours"], t["native"]),
           "tflops": flops / med / 1e12, "native_tflops": flops / nmed / 1e12,
           "roofline_fraction": flops / med / TENSOR_FLOPS,
           "max_abs_diff_vs_native": max_diff(attention(q, k, v, causal, config=config)), "config": repr(config),
           "kernel": dispatched}
    if chosen:
        row["configs"] = {name: {"kernel": "native" if cfg is NO_KERNEL else prefill_plan(q, k, v, causal,
                                                                                           config=cfg)[0],
                                 "latency_s": statistics.median(t[f"config:{name}"]),
                                 **ratio_stats(t[f"config:{name}"], t["native"]),
                                 "max_abs_diff_vs_native": max_diff(run(cfg)(q, k, v))}
                          for name, cfg in chosen.items()}
    return row


# A variant of the dispatch where the dispatch's kernel has no such variant (shape_config).
NO_KERNEL = object()


def shape_config(cfg: Any, dispatched: str) -> Any:
    """A `--configs` entry at one shape: a variant of the dispatch (`dispatch-r1`) becomes the dispatch's kernel there
    (`dispatched`, its name) with its flag set, or NO_KERNEL where it has none (dispatch_variant.variant_config); any
    other configuration stays as named."""
    from ksearch.kernels.attention.dispatch_variant import DispatchVariant, variant_config

    if not isinstance(cfg, DispatchVariant):
        return cfg
    found = variant_config(dispatched, cfg)
    return NO_KERNEL if found is None else found


def prefill_calls(call: Callable[[Any, Any, Any], Any], q: Any, k: Any, v: Any, calls: str) -> Callable[[], Any]:
    """`call(q, k, v)` as the benchmark repeats it: independent calls on the same inputs, free to overlap on the
    device, or chained ones that wait for each other (each call's q the previous call's output, o having q's shape)."""
    if calls == "independent":
        return lambda: call(q, k, v)
    return chained_calls(lambda q, k, v: call(q, k, v), itertools.repeat({"q": q, "k": k, "v": v}), "q")


def summarize_decode(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The targets' figures over the rows: from the queued rounds, and from the stream where the rows have one."""
    big = [r for r in rows if r["kv_bytes"] > 64e6]
    huge = [r for r in rows if r["kv_bytes"] > 2**28]  # over 256 MiB: B 16 at 4k keys is exactly that, not over
    out = {"geomean_speedup": geomean([r["speedup"] for r in rows]),
           "min_speedup": min(r["speedup"] for r in rows),
           "min_roofline_fraction_kv_over_64MB": min((r["roofline_fraction"] for r in big), default=None),
           "min_tbs_kv_over_256MB": min((r["gbs"] / 1e3 for r in huge), default=None),
           "targets": "geomean >= 1.0x native, no shape below 0.9x, >= 4.2 TB/s where the KV read > 256 MB"}
    if rows and all("stream_speedup" in r for r in rows):
        out |= {"stream_geomean_speedup": geomean([r["stream_speedup"] for r in rows]),
                "stream_min_speedup": min(r["stream_speedup"] for r in rows),
                "stream_min_tbs_kv_over_256MB": min((r["stream_gbs"] / 1e3 for r in huge), default=None),
                "stream_native_min_tbs_kv_over_256MB": min((r["native_stream_gbs"] / 1e3 for r in huge),
                                                           default=None)}
    return out


def prefill_group(row: dict[str, Any]) -> tuple[int, bool, bool]:
    """The group a prefill row is read in: head dim, mask, and whether L >= 4096 (the targets' split)."""
    return row["D"], bool(row["causal"]), row["L"] >= 4096


def group_label(group: tuple[int, bool, bool]) -> str:
    d, causal, long = group
    return f"D={d}, {'mask' if causal else 'no mask'}, {'L >= 4096' if long else 'L < 4096'}"


def prefill_groups(rows: list[dict[str, Any]], names: Sequence[str]) -> dict[str, dict[str, Any]]:
    """Per group: its shape count, the dispatch's geomean and each named configuration's over the shapes where it
    ran (not MLX's attention in its place): a dispatch rule is read off this, group by group."""
    grouped: dict[tuple[int, bool, bool], list[dict[str, Any]]] = {}
    for r in rows:
        grouped.setdefault(prefill_group(r), []).append(r)
    out = {}
    for group in sorted(grouped):
        members = grouped[group]
        entry: dict[str, Any] = {"shapes": len(members), "dispatch": geomean([r["speedup"] for r in members])}
        for name in names:
            ran = [r["configs"][name]["speedup"] for r in members if r["configs"][name]["kernel"] != "native"]
            entry[name] = geomean(ran) if ran else None
        out[group_label(group)] = entry
    return out


def summarize_prefill(rows: list[dict[str, Any]]) -> dict[str, Any]:
    long = [r["speedup"] for r in rows if r["L"] >= 4096]
    d128_long = [r["speedup"] for r in rows if r["L"] >= 4096 and r["D"] == 128]
    names = sorted({name for r in rows for name in r.get("configs", {})})
    out: dict[str, Any] = {
        "geomean_speedup": geomean([r["speedup"] for r in rows]),
        "geomean_speedup_L_ge_4096": geomean(long) if long else None,
        "geomean_speedup_D128_L_ge_4096": geomean(d128_long) if d128_long else None,
        "min_speedup": min(r["speedup"] for r in rows), "max_speedup": max(r["speedup"] for r in rows),
        "by_group": prefill_groups(rows, names),
        "targets": ">= 0.9x of native over the whole set, >= 1.0x at L >= 4096 with D=128, D=64 >= 0.8x"}
    if names:
        # Each configuration where it ran (a shape it does not fit falls back to native and is left out), and the
        # best of the dispatch and every configuration per shape: what a perfect rule over these would reach.
        out["configs"] = {name: {"geomean_speedup": geomean([r["configs"][name]["speedup"] for r in rows
                                                            if r["configs"][name]["kernel"] != "native"]),
                                 "shapes": sum(r["configs"][name]["kernel"] != "native" for r in rows)}
                          for name in names}
        out["geomean_speedup_best_of"] = geomean([max([r["speedup"]] + [c["speedup"] for c in r["configs"].values()
                                                                       if c["kernel"] != "native"]) for r in rows])
    return out


def prefill_lengths(shapes: list[dict[str, Any]], lengths: Sequence[int]) -> list[dict[str, Any]]:
    """The shapes at these lengths (all of them without any); ValueError in one line for a length the set lacks."""
    have = sorted({s["L"] for s in shapes})
    missing = [n for n in lengths if n not in have]
    if missing:
        raise ValueError(f"length {missing[0]} is not among the benchmark's ({', '.join(map(str, have))}); "
                         "name one or more of those")
    return [s for s in shapes if not lengths or s["L"] in lengths]


def run_bench(kind: str, full: bool, out_dir: str, notes: str = "", log: Callable[[str], None] = print,
              config: Any = None, name: str | None = None, configs: Sequence[str] = (),
              calls: str | None = None, lengths: Sequence[int] = (), dtypes: Sequence[str] = (),
              stream: bool = False) -> Path:
    """configs (prefill only): configuration names (wgmma or Metal) timed beside the dispatch at every shape; calls:
    "chained" or "independent" (bench_decode_shape, bench_prefill_shape), the one that is not the kind's default
    written under a name of its own (decode's default chained, prefill's independent); lengths (prefill only): the
    shapes at these L only, written under a name that says them (attention-prefill-*-l2048-*.json); dtypes (prefill
    only): the grid at these dtypes, other than the benchmark's own written under a name that says them
    (attention-prefill-*-float32-*.json); stream (decode only): also the calls handed to the device a step at a time,
    the next built while the device runs the one before (bench_decode_shape)."""
    from ksearch.backends import get_backend
    from ksearch.bench.results import make_result, write_result
    from ksearch.errors import BackendUnavailable
    from ksearch.kernels.device import kernels_absent

    backend = get_backend(None)
    picked = prefill_dtypes(dtypes)
    if kind == "decode":
        shapes, summ, default = decode_shapes(full), summarize_decode, "decode"
    else:
        shapes = prefill_lengths(prefill_shapes(full, picked), lengths)
        summ, default = summarize_prefill, "attention-prefill"
    if stream and kind != "decode":
        raise ValueError("the stream of calls is decode's: run `ksearch bench decode`")
    if configs and kind == "decode":
        raise ValueError("configurations beside the dispatch are for prefill: run `ksearch bench attention --configs`")
    calls = calls or ("chained" if kind == "decode" else "independent")
    if calls not in CALLS:
        raise ValueError(f"calls={calls!r}: use one of {', '.join(CALLS)}")
    absent = kernels_absent()
    if absent is not None:  # before minutes of timing MLX's attention against itself
        raise BackendUnavailable(f"bench {'decode' if kind == 'decode' else 'attention'}: {absent}")
    name = (name or default) + ("-independent" if kind == "decode" and calls == "independent" else
                                "-chained" if kind != "decode" and calls == "chained" else "")
    if kind != "decode":
        name += "".join(f"-{t}" for t in picked) if picked != PREFILL_DTYPES else ""
        name += "".join(f"-l{n}" for n in sorted(lengths))
    rows = []
    for shape in shapes:
        rows.append(bench_decode_shape(shape, config=config, calls=calls, stream=stream) if kind == "decode" else
                    bench_prefill_shape(shape, config=config, configs=configs, calls=calls))
        r = rows[-1]
        extra = "".join(f", {c}: {x['speedup']:.2f}x" for c, x in r.get("configs", {}).items())
        kernel = f" ({r['kernel']})" if "kernel" in r else ""  # decode: which of the library's kernels ran
        handed = (f"; a stream {r['stream_latency_s'] * 1e6:.1f} us vs {r['native_stream_latency_s'] * 1e6:.1f} us "
                  f"-> {r['stream_speedup']:.2f}x, {r['stream_gbs'] / 1e3:.2f} TB/s" if "stream_speedup" in r else "")
        log(f"{shape}: {r['latency_s'] * 1e6:.1f} us vs native {r['native_latency_s'] * 1e6:.1f} us "
            f"-> {r['speedup']:.2f}x{kernel}{extra}{handed}")
    data = make_result(name, backend, rows, shapes, sorted({s["dtype"] for s in shapes}), summ(rows), notes)
    path = write_result(data, out_dir)
    groups = data["summary"].get("by_group", {})
    for label, entry in groups.items():  # the groups side by side: a dispatch rule is read off these lines
        named = "".join(f", {k} {v:.3f}x" for k, v in entry.items() if k not in ("shapes", "dispatch") and v)
        log(f"{label} ({entry['shapes']}): dispatch {entry['dispatch']:.3f}x{named}")
    log(f"summary: { {k: v for k, v in data['summary'].items() if k != 'by_group'} }\nwrote {path}")
    return path
