"""One GPU run for the attention/decode kernels: correctness of every configuration, a configuration sweep, then
the benchmarks with the best configuration (JSON into the output directory).

    python benchmarks/attention_gpu.py check-decode | check-prefill     # correctness, one process per kind
    KS_CHECK_CONFIGS=ws2_n128_s3_p4_tmas_pst,... python benchmarks/attention_gpu.py check-prefill  # only those
        # (any wgmma configuration name: one outside the library's list gets the cases the library's kernels get)
    python benchmarks/attention_gpu.py sweep-decode | sweep-prefill      # timings per configuration (JSON)
    python benchmarks/attention_gpu.py versus-native OUT_DIR [--queued] [CONFIG ...]  # decode configs beside native
    python benchmarks/attention_gpu.py bench OUT_DIR                     # ksearch bench decode + attention
"""

from __future__ import annotations

import json
import math
import os
import statistics
import sys
from functools import partial
from typing import Any

os.environ.setdefault("MLX_ENABLE_TF32", "0")  # the fp32 reference must be real fp32

import mlx.core as mx  # noqa: E402

from ksearch.bench import attention as ba  # noqa: E402
from ksearch.bench.timing import time_rounds  # noqa: E402
from ksearch.kernels.attention.mma_sync import PrefillConfig, attention_cuda  # noqa: E402
from ksearch.kernels.attention.wgmma import WgmmaConfig, attention_wgmma  # noqa: E402
from ksearch.kernels.attention.wgmma_ws import WsConfig, attention_wgmma_ws, config_name, smem_problem  # noqa: E402
from ksearch.kernels.attention.wgmma_ws import parse_config as parse_ws_config  # noqa: E402
from ksearch.kernels.decode import cuda_split_k, decode, parse_config  # noqa: E402
from ksearch.kernels.decode.cuda_cluster import ClusterConfig  # noqa: E402
from ksearch.kernels.decode.cuda_split_k import DecodeConfig  # noqa: E402
from ksearch.kernels.device import hopper  # noqa: E402

DECODE_CONFIGS = [DecodeConfig(),  # 4 warps, 4 steps in flight in registers, separate merge kernel
                  DecodeConfig(fused=True), DecodeConfig(group_heads=False),
                  DecodeConfig(unroll=2, target_blocks=528, min_chunk=256), DecodeConfig(warps=8, unroll=2)]
# Split-K with the steps' rows through a ring in shared memory (cp.async): the library default (2 steps of 4 keys a
# lane), 3 and 4 steps of 2.
RING_CONFIGS = [cuda_split_k.DEFAULT, DecodeConfig(ring=3, unroll=2), DecodeConfig(ring=4, unroll=2)]
# The tensor-core decode without clusters (safe under MLX's CUDA graphs; Hopper): the default, 4 + 2 warps, and
# consumers that copy their own tiles (no producer warp), 3 and 4 slots a warp.
MMA_CONFIGS = [ClusterConfig(cluster=False), ClusterConfig(consumers=4, producers=2, cluster=False),
               ClusterConfig(consumers=4, producers=0, slots=3, cluster=False),
               ClusterConfig(consumers=2, producers=0, slots=4, cluster=False),
               # the tiles by tensor copies through a host-encoded map (TMA)
               ClusterConfig(consumers=4, producers=0, slots=3, cluster=False, tma=True)]
PREFILL_CONFIGS = [PrefillConfig(64, 64, True), PrefillConfig(128, 64, True), PrefillConfig(64, 64, False),
                   PrefillConfig(128, 32, True), PrefillConfig(64, 32, True)]
# Hopper only; the first two are the library's there (kernels/attention: WIDE, with the conditional rescale; TALL,
# persistent, at D=64), then TALL one block an item and the two with bulk copies from tile images (where no tensor map
# can be made; the first is WIDE's).
WGMMA_CONFIGS = [WsConfig(3, 64, 4, 4, tma=3, crescale=True), WsConfig(2, 128, 3, 4, tma=3, persist=True),
                 WsConfig(2, 128, 3, 4, tma=3),
                 WsConfig(3, 64, 4, 4, bulk=True, crescale=True), WsConfig(2, 128, 3, 4, bulk=True),
                 # persistent blocks whose producer keeps 32 registers (no spills): the second is the library's
                 # WIDE_PERSIST (D=128 causal); one with the next Q early
                 WsConfig(2, 128, 3, 4, tma=3, persist=True, preg=32),
                 WsConfig(3, 64, 4, 4, tma=3, persist=True, preg=32, crescale=True),
                 WsConfig(2, 128, 3, 4, tma=3, persist=True, qnext=True, preg=32),
                 # WIDE rescaling O at every tile
                 WsConfig(3, 64, 4, 4, tma=3),
                 # ping-pong between the two consumer warpgroups (FlashAttention-3's order), persistent and not
                 WsConfig(2, 128, 3, 4, tma=3, persist=True, pp=True), WsConfig(2, 128, 3, 4, tma=3, pp=True),
                 WsConfig(3, 64, 3, 4, bulk=True),
                 WgmmaConfig(3, 64),
                 WgmmaConfig(3, 64, 2, "ca"), WgmmaConfig(2, 64), WgmmaConfig(2, 128), WsConfig(2, 64, 3, 4),
                 WsConfig(3, 64, 3, 4)]


def prefill_kernel(cfg, q, k, v, causal):
    if isinstance(cfg, WsConfig):
        return attention_wgmma_ws(q, k, v, causal, cfg)
    if isinstance(cfg, WgmmaConfig):
        return attention_wgmma(q, k, v, causal, cfg)
    return attention_cuda(q, k, v, causal, cfg)


def ref_attention(q, k, v, causal):
    f = mx.float32
    q, k, v = q.astype(f), k.astype(f), v.astype(f)
    g = q.shape[1] // k.shape[1]
    k, v = mx.repeat(k, g, axis=1), mx.repeat(v, g, axis=1)
    s = (q @ k.transpose(0, 1, 3, 2)) / math.sqrt(q.shape[-1])
    if causal:
        length, n = q.shape[2], k.shape[2]
        keep = mx.arange(n)[None, :] <= mx.arange(length)[:, None] + (n - length)
        s = mx.where(keep, s, -mx.inf)
    return mx.softmax(s, axis=-1) @ v


def check(kind: str) -> int:
    bad = 0
    failed: set[str] = set()
    mx.random.seed(1)
    if kind == "decode":
        cases = [(2, 8, 2, 1300, 1000, 128), (1, 8, 2, 600, 37, 64), (1, 32, 8, 4352, 4096, 128),
                 (3, 16, 4, 9000, 8191, 128), (1, 8, 8, 2100, 2048, 128), (2, 8, 1, 5000, 4999, 64)]
        # Every dtype/head dim/group size for the default, the fused (its merge's lanes depend on G x D), a ring
        # configuration and three tensor-core ones; the others at D=128 fp16 (each instance JIT-compiles).
        runs = [(cfg, c, t) for cfg in [*DECODE_CONFIGS[:2], RING_CONFIGS[0], *MMA_CONFIGS[:5:2]]
                for c in cases for t in (mx.float16, mx.bfloat16)]
        runs += [(cfg, c, mx.float16) for cfg in [*DECODE_CONFIGS[2:], *RING_CONFIGS[1:], *MMA_CONFIGS[1:4:2]]
                 for c in cases[2:4]]
        for cfg, (b, hq, hkv, cap, length, d), dt in runs:
            if True:
                q = mx.random.normal((b, hq, 1, d)).astype(dt)
                kc = mx.random.normal((b, hkv, cap, d)).astype(dt)
                vc = mx.random.normal((b, hkv, cap, d)).astype(dt)
                # Garbage past `length` must not leak into the result.
                kc[:, :, length:] = mx.nan
                vc[:, :, length:] = mx.nan
                out = decode(q, kc, vc, length, config=cfg).astype(mx.float32)
                ref = ref_attention(q, kc[:, :, :length], vc[:, :, :length], False)
                err = float(mx.max(mx.abs(out - ref)).item())
                ok = err < (2e-2 if dt == mx.bfloat16 else 4e-3)
                bad += not ok
                failed.add(repr(cfg)) if not ok else None
                print(f"decode {cfg} {(b, hq, hkv, cap, length, d)} {dt}: err {err:.2e} {'ok' if ok else 'FAIL'}",
                      flush=True)
        # Layouts 16-byte loads cannot take (rows of D + 4, q two bytes off): NaN, or right numbers where MLX hands
        # the kernel a contiguous copy, never a crash or a wrong number.
        for b, hq, hkv, cap, length, d in cases[1:3]:
            q = mx.random.normal((b, hq, 1, d + 2)).astype(mx.float16)[..., 1:d + 1]
            kc = mx.random.normal((b, hkv, cap, d + 4)).astype(mx.float16)[..., :d]
            vc = mx.random.normal((b, hkv, cap, d)).astype(mx.float16)
            for cfg in (DECODE_CONFIGS[0], RING_CONFIGS[0], MMA_CONFIGS[0], MMA_CONFIGS[2], MMA_CONFIGS[4]):
                out = decode(q, kc, vc, length, config=cfg).astype(mx.float32)
                err = float(mx.max(mx.abs(out - ref_attention(q, kc[:, :, :length], vc[:, :, :length],
                                                              False))).item())
                ok = err < 4e-3 or bool(mx.all(mx.isnan(out)).item())
                bad += not ok
                print(f"decode unaligned rows {cfg} {(b, hq, hkv, cap, length, d)}: err {err:.2e} "
                      f"{'ok' if ok else 'FAIL'}", flush=True)
    else:
        cases = [(1, 4, 2, 256, 256, 64), (2, 4, 4, 256, 256, 128), (1, 8, 2, 256, 512, 128), (1, 2, 1, 512, 512, 64)]
        runs = [(PREFILL_CONFIGS[1], c, t, cz) for c in cases for t in (mx.float16, mx.bfloat16) for cz in (False, True)]
        runs += [(cfg, c, mx.float16, cz) for cfg in PREFILL_CONFIGS if cfg != PREFILL_CONFIGS[1]
                 for c in cases[1:3] for cz in (False, True)]
        # more work items than SMs (persistent blocks walk several; partial last blocks; S > L), D 128 and 64
        many = [(2, 16, 4, 1216, 1280, 128), (1, 32, 8, 2240, 2304, 64)]
        if hopper():  # L=256 is a partial last block at 192 rows a block
            runs += [(cfg, c, t, cz) for cfg in WGMMA_CONFIGS[:5] for c in cases + many
                     for t in (mx.float16, mx.bfloat16) for cz in (0, 1)]
            runs += [(cfg, c, mx.float16, cz) for cfg in WGMMA_CONFIGS[5:]
                     for c in cases[1:3] + (many if getattr(cfg, "persist", False) else []) for cz in (0, 1)]
        only = [t for t in os.environ.get("KS_CHECK_CONFIGS", "").split(",") if t]
        if only:  # KS_CHECK_CONFIGS=name,...: only these configurations (names as config_name writes them)
            runs = [r for r in runs if isinstance(r[0], (WsConfig, WgmmaConfig)) and config_name(r[0]) in only]
            listed = {config_name(c) for c in WGMMA_CONFIGS}
            try:
                extra = [parse_ws_config(n) for n in only if n not in listed]
            except ValueError as exc:
                sys.exit(f"KS_CHECK_CONFIGS: {exc}")
            # a name outside the list (a store or epilogue variant): the cases the library's own kernels get, at the
            # head dimensions its shared memory allows
            # `_kt` on 132 SMs: a last round of 36 items in 3 parts (a partial last block, S > L), of 28 in 4
            split = [(1, 24, 8, 1216, 1344, 128), (1, 16, 4, 1920, 1920, 64)]
            runs += [(cfg, c, t, cz) for cfg in extra for c in cases + many + (split if cfg.ktail else [])
                     if smem_problem(cfg, c[5]) is None for t in (mx.float16, mx.bfloat16) for cz in (0, 1)]
        # and the two middle shapes again with rising scores (rows whose maxima grow tile after tile, so the online
        # softmax rescales O inside the loop; with `_cr`, some tiles do and some keep the old maximum) and stepped
        # ones (grown once past a row's first tiles: with `_xa`, the tile run again that takes the new maximum)
        scored = [(*r, "random") for r in runs] + [(*r, sc) for sc in ("rising", "stepped") for r in runs
                                                    if r[1] in cases[1:3]]
        for cfg, (b, hq, hkv, length, s, d), dt, causal, scores in scored:
            q, k, v = ba.prefill_inputs((b, hq, length, d), (b, hkv, s, d), dt, scores)
            out = prefill_kernel(cfg, q, k, v, bool(causal)).astype(mx.float32)
            err = float(mx.max(mx.abs(out - ref_attention(q, k, v, causal))).item())
            ok = err < (3e-2 if dt == mx.bfloat16 else 5e-3)
            bad += not ok
            failed.add(repr(cfg)) if not ok else None
            print(f"prefill {cfg} {(b, hq, hkv, length, s, d)} {dt} causal={causal} {scores}: err {err:.2e} "
                  f"{'ok' if ok else 'FAIL'}", flush=True)
        # `_kt`: launches queued without a wait between them, which MLX may run side by side: each counts on
        # counters of its own (wgmma_ws_tail.fresh_counters), so every one is right
        for cfg in (c for c in extra if c.ktail) if only else ():
            q, k, v = ba.prefill_inputs((1, 24, 1216, 128), (1, 8, 1344, 128), mx.float16, "random")
            outs = [prefill_kernel(cfg, q, k, v, False) for _ in range(6)]
            mx.eval(*outs)
            ref = ref_attention(q, k, v, False)
            err = max(float(mx.max(mx.abs(o.astype(mx.float32) - ref)).item()) for o in outs)
            bad += err >= 5e-3
            print(f"prefill {cfg} six queued calls: err {err:.2e} {'ok' if err < 5e-3 else 'FAIL'}", flush=True)
    print(f"{kind}: {bad} failures", flush=True)
    with open(os.path.join(os.environ.get("OUT", "."), f"failed-{kind}.json"), "w") as fh:
        json.dump(sorted(failed), fh)
    return 1 if bad else 0


def _passing(kind: str, configs: list) -> list:
    path = os.path.join(os.environ.get("OUT", "."), f"failed-{kind}.json")
    if not os.path.exists(path):
        return configs
    with open(path) as fh:
        failed = set(json.load(fh))
    return [c for c in configs if repr(c) not in failed]


def sweep(kind: str, out: str) -> None:
    rows = []
    # Our latency only (the benchmark proper times native): many configurations, little device time.
    if kind == "decode":
        for shape in ba.decode_shapes(False):
            dt = getattr(mx, shape["dtype"])
            b, hq, hkv, d, n, cap = (shape[k] for k in ("B", "Hq", "Hkv", "D", "length", "capacity"))
            q = mx.random.normal((b, hq, 1, d)).astype(dt)
            kc, vc = (mx.random.normal((b, hkv, cap, d)).astype(dt) for _ in range(2))
            mx.eval(q, kc, vc)
            for cfg in _passing("decode", DECODE_CONFIGS):
                fn = lambda c=cfg, q=q, kc=kc, vc=vc, n=n: decode(q, kc, vc, n, config=c)  # noqa: E731
                t = statistics.median(time_rounds({"o": fn}, 5, 10)["o"])
                gbs = 2 * b * hkv * n * d * 2 / t / 1e9
                rows.append({"shape": shape, "config": repr(cfg), "latency_s": t, "gbs": gbs})
                print(f"{b} {n} {cfg}: {t * 1e6:.1f} us {gbs:.0f} GB/s", flush=True)
    else:
        shapes = [{"B": 1, "Hq": 32, "Hkv": 8, "D": d, "L": n, "S": n, "dtype": "float16", "causal": c}
                  for d in (128, 64) for n in (4096,) for c in (False, True)]
        for shape in shapes:
            b, hq, hkv, d, n, causal = (shape[k] for k in ("B", "Hq", "Hkv", "D", "L", "causal"))
            q = mx.random.normal((b, hq, n, d)).astype(mx.float16)
            k, v = (mx.random.normal((b, hkv, n, d)).astype(mx.float16) for _ in range(2))
            mx.eval(q, k, v)
            for cfg in _passing("prefill", PREFILL_CONFIGS):
                fn = lambda c=cfg, q=q, k=k, v=v, z=causal: attention_cuda(q, k, v, z, c)  # noqa: E731
                t = statistics.median(time_rounds({"o": fn}, 5, 3)["o"])
                tf = 4.0 * b * hq * n * n * d / (2 if causal else 1) / t / 1e12
                rows.append({"shape": shape, "config": repr(cfg), "latency_s": t, "tflops": tf})
                print(f"{shape} {cfg}: {tf:.0f} TFLOP/s", flush=True)
    with open(os.path.join(out, f"sweep-{kind}.json"), "w") as fh:
        json.dump(rows, fh, indent=1)


def versus_native(out: str, texts: list[str]) -> None:
    """Decode configurations and MLX's SDPA on the cache slice, side by side on `bench decode`'s shapes, each
    contender's calls back to back in blocks (the blocks in turn, 5 times): the configurations' speedups over native
    per shape and as a geomean (JSON). Each call evaluated and synchronised (the latency of one waited-for call), or
    with `--queued` ten calls queued before one evaluation, independent (the same inputs each call), or with
    `--chained` too each call's query the previous call's output, caches read in turn (as `ksearch bench decode`
    times them)."""
    queued, chain = "--queued" in texts, "--chained" in texts
    texts = [t for t in texts if t not in ("--queued", "--chained")]
    if chain and not queued:
        raise SystemExit("versus-native: --chained is for --queued rounds (each call waited for is chained already)")
    from ksearch.backends import get_backend
    from ksearch.bench.results import make_result, write_result
    from ksearch.bench.timing import geomean
    from ksearch.kernels.decode import native_decode

    try:  # `mma` or `mma:FIELD=VALUE,...`: the tensor-core kernel without clusters (cuda_cluster.py, cluster=False)
        configs = [cuda_split_k.DEFAULT] + [parse_config(t) for t in texts]
    except ValueError as exc:
        raise SystemExit(str(exc)) from None
    figures, shapes = [], []
    for shape in ba.decode_shapes(True):
        q, kc, vc = ba.decode_inputs(shape)
        n = shape["length"]
        caches = ba.decode_caches(shape, kc, vc) if chain else [(kc, vc)]
        calls: dict[str, Any] = {"native": lambda q, kc, vc, n=n: native_decode(q, kc, vc, n)}
        for cfg in configs:
            calls[repr(cfg)] = lambda q, kc, vc, c=cfg, n=n: decode(q, kc, vc, n, config=c)
        fns = {name: ba.chained(call, q, caches) if chain else partial(call, q, kc, vc)
               for name, call in calls.items()}
        time_rounds(fns, 2, warmup=3, sync_each=True)
        times: dict[str, list[float]] = {k: [] for k in fns}
        for _ in range(5):
            for name, fn in fns.items():
                times[name] += (time_rounds({name: fn}, 4, 10, warmup=0) if queued
                                else time_rounds({name: fn}, 20, warmup=0, sync_each=True))[name]
        native = statistics.median(times["native"])
        kv = 2 * shape["B"] * shape["Hkv"] * n * shape["D"] * kc.dtype.size  # K and V, as bench decode counts them
        for cfg in configs:
            med = statistics.median(times[repr(cfg)])
            figures.append({**shape, "config": repr(cfg), "latency_s": med, "native_latency_s": native,
                            "speedup": native / med, "gbs": kv / med / 1e9, "native_gbs": kv / native / 1e9})
            print(f"{shape['B']:>2} {n:>6} {shape['dtype']:<8} {cfg}: {med * 1e6:7.1f} us vs native "
                  f"{native * 1e6:7.1f} us  x{native / med:.3f}  {kv / med / 1e9:5.0f} GB/s", flush=True)
        shapes.append(shape)
    summary = {repr(c): {"geomean_speedup": geomean([f["speedup"] for f in figures if f["config"] == repr(c)]),
                         "min_speedup": min(f["speedup"] for f in figures if f["config"] == repr(c))}
               for c in configs}
    for name, s in summary.items():
        print(f"{name}: geomean x{s['geomean_speedup']:.3f}, min x{s['min_speedup']:.3f}", flush=True)
    how = ("blocks of 4 rounds of 10 queued calls" + (", chained" if chain else "") if queued
           else "each call evaluated and synchronised, blocks of 20 calls")
    name = ("decode-versus-native-queued" + ("-chained" if chain else "")) if queued else "decode-versus-native"
    data = make_result(name, get_backend("mlx-cuda"),
                       figures, shapes, sorted({s["dtype"] for s in shapes}), summary=summary,
                       notes=f"{how} per contender in turn, 5 times; native = SDPA on the cache slice")
    print(write_result(data, out), flush=True)


def best_from_sweep(path: str) -> str | None:
    """The configuration with the best geomean latency in a sweep file."""
    with open(path) as fh:
        rows = json.load(fh)
    by: dict[str, list[float]] = {}
    for r in rows:
        by.setdefault(r["config"], []).append(math.log(r["latency_s"]))
    # Every configuration ran every shape: the lowest mean log-latency is the best geomean.
    return min(by, key=lambda c: statistics.mean(by[c])) if by else None


def harness(out: str) -> None:
    """The gqa_decode family's simplest and tuned renderings through the project's harness vs its native baseline."""
    from ksearch.backends import get_backend
    from ksearch.harness import EvalOptions, evaluate
    from ksearch.policy.templates.gqa_decode import FAMILIES
    from ksearch.tasks import get_task

    fam = next(f for f in FAMILIES if f.id == "gqa_decode.cuda.split_k")
    tuned = {"group_heads": True, "target_blocks": 1056, "unroll": 4, "prefetch": True, "warps": 4, "min_chunk": 128,
             "fused": False}
    rows = []
    for params in (fam.default(), tuned):
        r = evaluate(get_task("gqa_decode"), fam.source(params), get_backend("mlx-cuda"),
                     EvalOptions(workloads=["gpu_b1_len4096", "gpu_b16_len32768"], timeout_s=120))
        rows.append({"params": params, "status": r.status, "score": r.score, "message": r.message[:500]})
        print(rows[-1], flush=True)
    with open(os.path.join(out, "harness-gqa_decode.json"), "w") as fh:
        json.dump(rows, fh, indent=1, default=str)


if __name__ == "__main__":
    cmd = sys.argv[1]
    if cmd.startswith("check-"):
        sys.exit(check(cmd.split("-", 1)[1]))
    if cmd.startswith("sweep-"):
        sweep(cmd.split("-", 1)[1], sys.argv[2])
    elif cmd == "versus-native":
        versus_native(sys.argv[2], sys.argv[3:])
    elif cmd == "harness":
        harness(sys.argv[2])
    elif cmd == "best":
        print(best_from_sweep(sys.argv[2]))
    elif cmd == "bench":
        # bench KIND OUT_DIR full|default [SWEEP_JSON]: the sweep's best configuration, else the library default.
        best = best_from_sweep(sys.argv[5]) if len(sys.argv) > 5 and os.path.exists(sys.argv[5]) else None
        config = eval(best, {"DecodeConfig": DecodeConfig, "PrefillConfig": PrefillConfig}) if best else None
        print("config:", best, flush=True)
        ba.run_bench(sys.argv[2], sys.argv[4] == "full", sys.argv[3], config=config)
