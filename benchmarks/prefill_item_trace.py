"""Where a prefill work item's time goes inside the kernel: the library's tensor-copy prefill (one block an item, or
persistent) with clock64 stamps at five points of every work item, read by consumer thread 0, written to an extra
output. Phases of an item:

    start -> q      the consumer's Q load and its warpgroup barrier (one block an item: the block's set-up too),
                    told apart at the Q copy's issue: set_up before it, q_copy after
    q -> s0         the first K tile's wait and the product S(0)
    s0 -> loop      softmax(0), the loop over the other tiles, the last O += P V
    loop -> end     the epilogue: normalisation and the stores of O

and maps_ready, the producer's tensor maps published and fenced, from a block's first item's start (one block an item:
what the first K tile waits for beyond its copy); per block the span from its first item's start to its last item's
end (globaltimer) against the kernel's span; whether items start in crowds (within 500 ns of each other, as one block
an item starts wave after wave) and the Q load of crowded items against the rest, and of the first wave against the
later ones; the SM clock the stamps imply. The trace is read from the fourth call: the first call's buffers are new,
and its first wave waits for them (kept beside the rest as `first_call`). A phase's median in cycles and in tiles of
the loop's own median cycles a tile: the cost an item pays beyond its tiles. The stamped kernel is timed beside the
library's own kernel and cuDNN (bench.timing.time_rounds), so what the stamps cost is on record, and its output is
checked against cuDNN's.

    python benchmarks/prefill_item_trace.py OUT_DIR [--configs ws3_n64_s4_p4_tmas,...] [--lengths 2048,8192]
                                             [--dims 128] [--batch 4] [--heads 32] [--hkv 8] [--causal]
                                             [--strip exp,max,rescale] [--scores random|rising|stepped]

`--strip` takes work out of every tile's softmax to see what the loop's time is made of (the output is then wrong,
and recorded as such): `exp` leaves P the scaled scores without their exp2 (one MUFU.EX2 an element fewer), `max`
drops the row maxima (their FMNMX over the tile; the shuffles stay), `rescale` O's multiplication by each tile's
correction (what rescaling only when a row's maximum grows would save at most). `--scores rising` times inputs whose
row maxima keep growing (the conditional rescale's worst case) instead of standard normal ones, `--scores stepped`
inputs whose rows' scores sit 6 units of exp2 higher after their first 128 keys (one growth within `_cr`'s 2^8).

Writes prefill-item-trace-*.json (ksearch-bench/1).
"""

from __future__ import annotations

import argparse
import statistics
from functools import partial
from typing import Any

# A work item's record: five clock64 stamps (0-4), its tile count (5), globaltimer at its start and end (6, 7), the
# producer's clock64 once its tensor maps are published (8; a block's first item only), the consumer's clock64 as it
# issues the Q load (9: with one block an item, after the block's set-up)
SLOTS = 10
WARM_CALLS = 3  # calls before the one whose trace is read (the first call's buffers are new: see measure)
FIRST_CALL_KEYS = ("kernel_span_ns", "q_load_first_wave_cycles", "q_load_later_cycles", "sm_clock_ghz")
CROWD_NS = 500  # items that start within this of each other start "together" (a tile takes about 1 us at D=128)
STAMP_HEADER = r"""
#define KS_STAMP(i) do { if (threadIdx.x == KS_TRACER) trace[ks_tr + (i)] = (unsigned long long)clock64(); } while (0)
#define KS_WALL(i) do { if (threadIdx.x == KS_TRACER) { unsigned long long g_; \
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(g_)); trace[ks_tr + (i)] = g_; } } while (0)
"""
_Q_BARRIER = 'asm volatile("bar.sync %0, 128;\\n" :: "r"(1 + wg) : "memory");'
_S0_DONE = "release(kempty, 0);"
_EPILOGUE_START = "    ks_fence_regs<4>(lacc);\n    const float lrow[2]"
_ITEM_LOOP = "\n    for (int item = blockIdx.x; item < ITEMS; item += gridDim.x) {"
_ITEM_LOOP_SNAKE = "\n    for (int item = blockIdx.x; item < ITEMS; item = next_item(item)) {"  # `_sn`
_ITEM_LOOP_PARTS = "\n    for (int vitem = blockIdx.x; vitem < VITEMS; vitem = next_item(vitem)) {"  # `_sn` with `_kt`
_MAPS_READY = "          ks_tmap_acquire(gmap + 16);\n"  # the producer's thread, once a block
_Q_ISSUE = "    ks_load_core<D, 128, 64>(Qs + wg * 64 * D, qg"
_Q_ISSUE_PERSIST = "    if (!QNEXT || item == blockIdx.x)\n      ks_load_core<D, 128, 64>"
# `_qt`: the consumers issue nothing for Q; its stamps are the wait's start (9) and end (1)
_Q_WAIT = "    ks_mbar_wait(qfull, qi & 1);"


def _insert(text: str, anchor: str, code: str, before: bool = False) -> str:
    """`text` with `code` after (or before) `anchor`, which must occur once: a kernel text that changed shape fails
    here, not as a stamp in the wrong place."""
    if text.count(anchor) != 1:
        raise RuntimeError(f"prefill_item_trace: {anchor[:50]!r} occurs {text.count(anchor)} times in the kernel text")
    return text.replace(anchor, code + anchor if before else anchor + code)


# What `--strip` takes out of the softmax, as (text, replacement): each must occur once in the kernel's text.
STRIPS = {
    "exp": ("s[i] = ks_exp2(fmaf(s[i], sl2, -msc[(i >> 1) & 1]));", "s[i] = fmaf(s[i], sl2, -msc[(i >> 1) & 1]);"),
    "max": ("for (int i = 0; i < BN / 2; ++i) mx[(i >> 1) & 1] = fmaxf(mx[(i >> 1) & 1], s[i]);", ";"),
    "rescale": ("for (int i = 0; i < D / 2; ++i) oacc[i] *= corr[(i >> 1) & 1];", ";"),
}


def stamped_source(cfg: Any, strip: tuple[str, ...] = ()) -> str:
    """The tensor-copy prefill's text for `cfg` (persistent or one block an item) with the stamps; it writes output
    `trace` (MAXI items a block of SLOTS each, MAXI a template constant). `strip`: names of STRIPS to apply."""
    from ksearch.kernels.attention import wgmma, wgmma_ws, wgmma_ws_tail

    text = wgmma_ws.source_text(cfg)
    for name in strip:
        old, new = STRIPS[name]
        if text.count(old) != 1:
            raise RuntimeError(f"--strip {name}: the softmax's text moved ({text.count(old)} matches)")
        text = text.replace(old, new)
    if cfg.persist:
        # the record of the block's round: item / G in either order (snake order deals round r's items backwards)
        # with `_kt` a record a walked item, a last-round item's part one of its own
        walked = "vitem" if cfg.ktail else "item"
        text = _insert(text, _ITEM_LOOP_PARTS if cfg.ktail else _ITEM_LOOP_SNAKE if cfg.snake else _ITEM_LOOP,
                       f"\n    const size_t ks_tr = ((size_t)blockIdx.x * MAXI + {walked} / (int)gridDim.x) * {SLOTS};"
                       "\n    KS_STAMP(0); KS_WALL(6);")
        issue = _Q_WAIT if cfg.qtma else _Q_ISSUE_PERSIST
        text = _insert(text, issue, "    KS_STAMP(9);\n", before=True)
        first_record = f"(size_t)blockIdx.x * MAXI * {SLOTS}"
    else:
        text = (f"    const size_t ks_tr = ((size_t)blockIdx.y * gridDim.x + blockIdx.x) * {SLOTS};\n"
                "    KS_STAMP(0); KS_WALL(6);\n" + text)
        text = _insert(text, _Q_ISSUE, "    KS_STAMP(9);\n", before=True)
        first_record = "ks_tr"
    text = _insert(text, _MAPS_READY, f"          trace[{first_record} + 8] = (unsigned long long)clock64();\n")
    # the Q barrier and the first product are looked for before the epilogue, whose `_ob` form has barriers too
    text = _insert(text, _EPILOGUE_START, "    KS_STAMP(3);\n", before=True)
    head, tail = text.split("    KS_STAMP(3);\n")
    head = _insert(_insert(head, _Q_WAIT if cfg.qtma else _Q_BARRIER, "\n    KS_STAMP(1);"), _S0_DONE, "\n    KS_STAMP(2);")
    text = head + "    KS_STAMP(3);\n" + tail
    epilogue = (wgmma.EPILOGUE_BULK if cfg.obulk else wgmma.EPILOGUE_STORE4 if wgmma_ws.store_bytes(cfg) == 4
                else wgmma_ws_tail.merger_stores(wgmma.EPILOGUE) if cfg.ktail else wgmma.EPILOGUE)
    return _insert(text, epilogue, "    KS_STAMP(4); KS_WALL(7);\n"
                                        "    if (threadIdx.x == KS_TRACER) trace[ks_tr + 5] = (unsigned long long)ntiles;\n")


def stamped_header(cfg: Any) -> str:
    from ksearch.kernels.attention import wgmma_ws

    return (wgmma_ws.cp_cache(cfg.cp)[0] + wgmma_ws.WGMMA_HEADER + wgmma_ws.TMA_HEADER
            + wgmma_ws.launch_bounds(cfg.threads(), cfg.blocks) + stamp_macros(cfg))


def stamp_macros(cfg: Any) -> str:
    """The stamp macros for `cfg`'s kernel, reading the clock of `tracer_thread(cfg)`."""
    return f"#define KS_TRACER {tracer_thread(cfg)}\n" + STAMP_HEADER


def tracer_thread(cfg: Any) -> int:
    """The thread whose clock the stamps read: the first consumer's, or with `_wt` the last consumer warpgroup's
    first (the only one that runs every tile of an item; the first stops at its own rows' diagonal)."""
    return 128 * (cfg.wg - 1) if cfg.own_tiles else 0


def stamped_call(q_shape: tuple[int, ...], k_shape: tuple[int, ...], dtype: Any, causal: bool, cfg: Any,
                 strip: tuple[str, ...] = ()) -> Any:
    """A function (q, k, v) -> (o, trace) running the stamped kernel; trace reshaped (blocks, items a block, SLOTS)."""
    import mlx.core as mx

    from ksearch.kernels.attention import cuda_prefill, wgmma_ws, wgmma_ws_grid, wgmma_ws_tail

    maps = wgmma_ws.tensor_maps(q_shape, k_shape, cfg)
    items = cuda_prefill.blocks_for(q_shape, 64 * cfg.wg)
    grid = wgmma_ws_grid.persistent_blocks(items, cfg) if cfg.persist else None
    blocks = grid or items
    names, counters, extra_out = wgmma_ws_grid.extra_io(q_shape, k_shape, causal, cfg, blocks)  # `_kt`'s
    kern = cuda_prefill.build_kernel("ks_item_trace_" + wgmma_ws.kernel_name(cfg), stamped_source(cfg, strip),
                                     stamped_header(cfg), cfg.smem_bytes(q_shape[-1]),
                                     ("tmap", *(("qmap",) if cfg.qtma else ()), *names[0]),
                                     ("maps", *names[1], "trace"))
    maxi = -(-items // blocks)
    kwargs = cuda_prefill.launch_args(
        q_shape, dtype, 64 * cfg.wg, cfg.threads(),
        [("WG", cfg.wg), ("BN", cfg.bn), ("CAUSAL", bool(causal)), *wgmma_ws.stage_args(cfg), ("MAXI", maxi)],
        extra_outputs=(((wgmma_ws.map_slots(blocks, cfg),), mx.uint64), *extra_out, ((blocks * maxi * SLOTS,), mx.uint64)),
        grid_blocks=grid)

    def call(q: Any, k: Any, v: Any) -> tuple[Any, Any]:
        counts = [wgmma_ws_tail.fresh_counters(counters)] if counters else []
        outs = kern(inputs=[q, k, v, cuda_prefill.softmax_scale(q_shape[-1]), *maps, *counts], **kwargs)
        return outs[0], outs[-1].reshape(blocks, maxi, SLOTS)

    return call


def walked_items(q_shape: tuple[int, ...], k_shape: tuple[int, ...], causal: bool, cfg: Any) -> int:
    """The items a launch walks: its work items, a last-round item split along the keys (`_kt`) once a part."""
    from ksearch.kernels.attention import cuda_prefill, wgmma_ws_grid, wgmma_ws_tail

    items = cuda_prefill.blocks_for(q_shape, 64 * cfg.wg)
    if not cfg.ktail:
        return items
    full, tail, parts = wgmma_ws_tail.tail_parts(items, wgmma_ws_grid.persistent_blocks(items, cfg),
                                                 -(-k_shape[2] // cfg.bn), causal)
    return full + tail * parts


def ran(blocks: int, maxi: int, items: int, snake: bool = False) -> Any:
    """Which (block, item a block) records a launch wrote: block i walks items i, i + blocks, ... below `items`, or
    in snake order (`_sn`) i, 2 blocks - 1 - i, 2 blocks + i, ... (the rest of the output is whatever the allocator
    left there)."""
    import numpy as np

    block, rnd = np.arange(blocks)[:, None], np.arange(maxi)[None, :]
    pos = np.where(snake & (rnd % 2 == 1), blocks - 1 - block, block)
    return rnd * blocks + pos < items


def phases(trace: Any, items: int, snake: bool = False) -> dict[str, Any]:
    """Medians of each phase over the items (cycles), the loop's cycles a tile, each phase in tiles, and the blocks'
    busy spans against the kernel's (ns)."""
    import numpy as np

    t = np.asarray(trace).astype(np.int64)
    valid = ran(t.shape[0], t.shape[1], items, snake)
    rec = t[valid]
    d = np.diff(rec[:, :5], axis=1)
    tiles = rec[:, 5]
    per_tile = float(np.median(d[:, 2] / tiles))
    names = ["q_load", "first_product", "loop", "epilogue"]
    med = {n: float(np.median(d[:, i])) for i, n in enumerate(names)}
    # the Q load taken apart at the consumer's issue of it: the set-up before (one block an item: barriers, the
    # register hand-over), the copy and its barrier after; and the producer's tensor maps ready after a block's start
    med["set_up"] = float(np.median(rec[:, 9] - rec[:, 0]))
    med["q_copy"] = float(np.median(rec[:, 1] - rec[:, 9]))
    first = t[:, 0][valid[:, 0]]
    med["maps_ready"] = float(np.median(first[:, 8] - first[:, 0]))
    item = float(np.median(rec[:, 4] - rec[:, 0]))
    # cycles over nanoseconds between the same item's first and last stamps (clock64 and globaltimer side by side)
    wall = np.maximum(rec[:, 7] - rec[:, 6], 1)
    out: dict[str, Any] = {"items": int(len(rec)), "median_tiles": float(np.median(tiles)), "cycles": med,
                           "item_cycles": item, "loop_cycles_a_tile": per_tile,
                           "in_tiles": {n: v / per_tile for n, v in med.items() if n != "loop"},
                           "beyond_tiles_in_tiles": float(np.median((rec[:, 4] - rec[:, 0]) / per_tile - tiles)),
                           "sm_clock_ghz": float(np.median((rec[:, 4] - rec[:, 0]) / wall))}
    starts, ends = [], []
    gaps: list[int] = []
    for blk, ok in zip(t, valid, strict=True):
        done = blk[ok]
        starts.append(int(done[:, 6].min()))
        ends.append(int(done[:, 7].max()))
        gaps += (done[1:, 0] - done[:-1, 4]).tolist()  # persistent: an item's end to the next one's start
    if gaps:
        out["between_items_cycles"] = float(np.median(gaps))
    span = max(ends) - min(starts)
    busy = np.array(ends) - np.array(starts)
    out["kernel_span_ns"] = int(span)
    out["block_busy_median_ns"] = float(np.median(busy))
    out["block_start_spread_ns"] = int(max(starts) - min(starts))
    out["block_end_spread_ns"] = int(max(ends) - min(ends))
    out.update(start_crowds(rec[:, 6], d[:, 0]))
    return out


def start_crowds(starts_ns: Any, q_load: Any, window_ns: int = CROWD_NS) -> dict[str, Any]:
    """Whether items start in crowds, and what a crowd does to the Q load: blocks of one shape start together wave
    after wave, and every one then reads its Q at once. An item's crowd is the number of items (itself included)
    whose start lies within `window_ns` of its own; crowded items are those whose crowd is at least half the largest.
    The Q load's median for them against the rest, and for the first wave (the items that started within the window
    of the kernel's first start) against the later ones."""
    import numpy as np

    s = np.sort(np.asarray(starts_ns, dtype=np.int64))
    at = np.asarray(starts_ns, dtype=np.int64)
    crowd = np.searchsorted(s, at + window_ns, side="right") - np.searchsorted(s, at - window_ns, side="left")
    q = np.asarray(q_load, dtype=np.float64)

    def median(mask: Any) -> float | None:
        return float(np.median(q[mask])) if mask.any() else None

    crowded = crowd >= max(1, int(crowd.max()) // 2)
    first = at <= s[0] + window_ns
    return {"start_crowd_window_ns": window_ns, "start_crowd_median": float(np.median(crowd)),
            "start_crowd_max": int(crowd.max()), "crowded_items": int(crowded.sum()),
            "q_load_crowded_cycles": median(crowded), "q_load_uncrowded_cycles": median(~crowded),
            "q_load_first_wave_cycles": median(first), "q_load_later_cycles": median(~first)}


def measure(cfg_name: str, b: int, hq: int, hkv: int, length: int, d: int, causal: bool,
            strip: tuple[str, ...] = (), scores: str = "random") -> dict[str, Any]:
    import mlx.core as mx

    from ksearch.bench.attention import prefill_inputs
    from ksearch.bench.timing import time_rounds
    from ksearch.kernels.attention import attention, native_attention
    from ksearch.kernels.attention.wgmma_ws import parse_config

    cfg = parse_config(cfg_name)
    q, k, v = prefill_inputs((b, hq, length, d), (b, hkv, length, d), mx.float16, scores)
    call = stamped_call(tuple(q.shape), tuple(k.shape), q.dtype, causal, cfg, strip)
    items = walked_items(tuple(q.shape), tuple(k.shape), causal, cfg)
    o, trace = call(q, k, v)
    ref = native_attention(q, k, v, causal)
    mx.eval(o, trace, ref)
    # The first call writes buffers no call wrote before (its output, the tensor maps, the trace): its first wave
    # waits hundreds of microseconds that later calls do not (measured on the H200), so the phases come from a later
    # call and the first call's wave is kept beside them.
    first = phases(trace, items, cfg.snake)
    for _ in range(WARM_CALLS):
        o, trace = call(q, k, v)
        mx.eval(o, trace)
    err = float(mx.abs(o.astype(mx.float32) - ref.astype(mx.float32)).max().item())
    t = time_rounds({"library": partial(attention, q, k, v, causal, config=cfg),
                     "stamped": lambda: call(q, k, v)[0], "native": partial(native_attention, q, k, v, causal)},
                    rounds=7, n=2, round_s=0.01)
    row = {"config": cfg_name, "B": b, "Hq": hq, "Hkv": hkv, "L": length, "S": length, "D": d, "causal": causal,
           "dtype": "float16", "strip": list(strip), "scores": scores,
           "max_abs_diff_vs_native": err,
           "latency_s": statistics.median(t["library"]), "stamped_latency_s": statistics.median(t["stamped"]),
           "native_latency_s": statistics.median(t["native"]), **phases(trace, items, cfg.snake),
           "first_call": {key: first[key] for key in FIRST_CALL_KEYS}}
    stripped = (" stripped of " + "+".join(strip) if strip else "") + (f", {scores} scores" if scores != "random" else "")
    print(f"{cfg_name}{stripped} B {b} L {length} D {d} causal={causal}: err {err:.2e}, "
          f"library {row['latency_s'] * 1e6:.1f} us, "
          f"stamped {row['stamped_latency_s'] * 1e6:.1f}, native {row['native_latency_s'] * 1e6:.1f}; "
          f"{row['items']} items of {row['median_tiles']:.0f} tiles, {row['loop_cycles_a_tile']:.0f} cycles a tile, "
          f"beyond the tiles {row['beyond_tiles_in_tiles']:.2f} tiles; in tiles {row['in_tiles']}; "
          f"between items {row.get('between_items_cycles')}; span {row['kernel_span_ns'] / 1e3:.1f} us, block busy "
          f"{row['block_busy_median_ns'] / 1e3:.1f} us, starts spread {row['block_start_spread_ns'] / 1e3:.1f} us, "
          f"ends spread {row['block_end_spread_ns'] / 1e3:.1f} us; starts in crowds of {row['start_crowd_median']:.0f} "
          f"(largest {row['start_crowd_max']}), Q load crowded {row['q_load_crowded_cycles']} against "
          f"{row['q_load_uncrowded_cycles']} cycles, first wave {row['q_load_first_wave_cycles']} against "
          f"{row['q_load_later_cycles']}; SM clock {row['sm_clock_ghz']:.2f} GHz; the first call's first wave "
          f"{first['q_load_first_wave_cycles']} against {first['q_load_later_cycles']} cycles, span "
          f"{first['kernel_span_ns'] / 1e3:.1f} us", flush=True)
    return row


def too_big(cfg: Any, d: int) -> str | None:
    """Why `cfg` cannot run at head dimension `d` (wgmma_ws.smem_problem), or None: such a pair is skipped with a
    line, not launched (e.g. `TALL` with 4 stages at D=128)."""
    from ksearch.kernels.attention.wgmma_ws import smem_problem

    return smem_problem(cfg, d)


def library_configs() -> list[str]:
    """The names of the Hopper dispatch's three kernels (WIDE, WIDE_PERSIST, TALL), as KSEARCH_WGMMA_CONFIG spells
    them."""
    import importlib

    from ksearch.kernels.attention.wgmma_ws import config_name

    library = importlib.import_module("ksearch.kernels.attention")
    return [config_name(cfg) for cfg in (library.WIDE, library.WIDE_PERSIST, library.TALL)]


def main() -> None:
    from ksearch.bench.attention import SCORES

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out")
    ap.add_argument("--configs", default=",".join(library_configs()),
                    help="wgmma configurations (default: the library's three, WIDE, WIDE_PERSIST and TALL)")
    ap.add_argument("--lengths", default="2048,8192")
    ap.add_argument("--dims", default="128")
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--heads", type=int, default=32)
    ap.add_argument("--hkv", type=int, default=8)
    ap.add_argument("--causal", action="store_true")
    ap.add_argument("--strip", default="",
                    help="comma-separated: exp, max, rescale (timing only: the output is then wrong)")
    ap.add_argument("--scores", choices=SCORES, default="random",
                    help="rising: every row's maximum grows tile after tile; stepped: once, after a row's first 128 "
                         "keys (bench.attention.prefill_inputs)")
    args = ap.parse_args()
    strip = tuple(x.strip() for x in args.strip.split(",") if x.strip())
    if any(x not in STRIPS for x in strip):
        raise SystemExit(f"prefill_item_trace: --strip takes {', '.join(STRIPS)} (comma-separated), not {args.strip!r}")
    try:
        lengths, dims = ([int(x) for x in s.split(",")] for s in (args.lengths, args.dims))
    except ValueError:
        raise SystemExit("prefill_item_trace: --lengths and --dims take comma-separated integers") from None
    from ksearch.kernels.attention.wgmma_ws import parse_config

    names = [c.strip() for c in args.configs.split(",") if c.strip()]
    for name in names:
        try:
            cfg = parse_config(name)
        except ValueError as exc:
            raise SystemExit(f"prefill_item_trace: {exc}") from None
        if not cfg.tma:
            raise SystemExit(f"prefill_item_trace: {name} loads without tensor copies; name a _tma / _tmas configuration")
    from ksearch.backends import get_backend
    from ksearch.bench.results import make_result, write_result

    rows = []
    for length in lengths:
        for d in dims:
            for name in names:
                why = too_big(parse_config(name), d)
                if why:
                    print(f"{name} at D={d}: skipped, {why}", flush=True)
                    continue
                rows.append(measure(name, args.batch, args.heads, args.hkv, length, d, args.causal, strip,
                                    args.scores))
    data = make_result("prefill-item-trace", get_backend(None), rows,
                       [{"L": x, "D": d, "B": args.batch, "Hq": args.heads, "Hkv": args.hkv} for x in lengths for d in dims],
                       ["float16"], None, "phases of a work item in clock64 cycles, consumer thread 0")
    print("wrote", write_result(data, args.out))


if __name__ == "__main__":
    main()
