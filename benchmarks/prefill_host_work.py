"""The library prefill's own Python work a call, on any machine: `attention()` with each CUDA kernel configuration
named outright and MLX's custom-kernel calls replaced by stubs that hand back outputs made once (the tensor map
too), so what is timed is this package's dispatch, kernel lookup and argument building, not MLX's own cost of a
kernel call. A short prefill pays its host work in full where calls queue faster than the host makes them.

    python benchmarks/prefill_host_work.py [--calls 3000] [--repeat 15] [--out DIR]

Per configuration (B 1, Hq 32, Hkv 8, L = S = 2048, D 128, fp16, causal): the best of `--repeat` loops of `--calls`
calls, per call (the contenders' loops in turn, MLX's slice of K among them), and each in units of the slice (the
machine's own speed moves between processes; the ratio moves less). Configurations: the tensor-copy kernels the
Hopper dispatch runs (WIDE, WIDE_PERSIST), their bulk-copy fallback from tile images, the producer kernel with
cp.async, the synchronous wgmma kernel and mma.sync (GPUs that are not Hopper). Writes prefill-host-work-*.json to
DIR. Runs against earlier versions of the package too (`git checkout REV -- src`), for a before and after.
"""

from __future__ import annotations

import argparse
import importlib
from typing import Any

from decode_host_work import per_call

SHAPE = (1, 32, 8, 2048, 128)  # B, Hq, Hkv, L = S, D


def configs() -> dict[str, Any]:
    A = importlib.import_module("ksearch.kernels.attention")
    ws = importlib.import_module("ksearch.kernels.attention.wgmma_ws")
    mma = importlib.import_module("ksearch.kernels.attention.mma_sync")
    return {"tma_wide": A.WIDE, "tma_wide_persist": A.WIDE_PERSIST, "bulk": ws.with_bulk_copies(A.WIDE),
            "cp_async": ws.parse_config("ws3_n64_s3_p4"), "wgmma_sync": ws.parse_config("wg3_n64"),
            "mma_sync": mma.PrefillConfig(128, 64, True)}


def _clear(mods: list[Any]) -> None:
    """Every cache that may hold a kernel or launch made with the stubs (the names of earlier versions too)."""
    for mod in mods:
        for name in ("build_kernel", "_launch", "_tma_launch", "_image_kernel", "_image_launch", "tma_ready",
                     "map_input", "clear_plans"):
            fn = getattr(mod, name, None)
            if fn is None:
                continue
            if name == "clear_plans":
                fn()
            elif hasattr(fn, "cache_clear"):
                fn.cache_clear()


def measure(calls: int, repeat: int) -> list[dict[str, Any]]:
    import mlx.core as mx

    b, hq, hkv, length, d = SHAPE
    q = mx.zeros((b, hq, length, d), dtype=mx.float16)
    k = mx.zeros((b, hkv, length, d), dtype=mx.float16)
    maps = mx.zeros((16,), dtype=mx.uint64)
    mx.eval(q, k, maps)
    mods = [importlib.import_module(f"ksearch.kernels.attention{m}")
            for m in ("", ".cuda_prefill", ".wgmma", ".wgmma_ws", ".mma_sync")]
    A, ws = mods[0], mods[3]

    def stub(**kw: Any) -> Any:  # a kernel whose call hands back outputs made once: o (and the maps' scratch)
        return lambda **_call: [q, maps] if len(kw.get("output_names", ())) == 2 else [q]

    real = {"cuda_kernel": mx.fast.cuda_kernel, "map_input": ws.map_input}
    mx.fast.cuda_kernel = stub
    ws.map_input = lambda *a, **kw: maps
    _clear(mods)
    try:
        fns = {name: (lambda cfg=cfg: A.attention(q, k, k, True, config=cfg)) for name, cfg in configs().items()}
        names = {name: A.prefill_plan(q, k, k, True, config=cfg)[0] for name, cfg in configs().items()}
        times = per_call({**fns, "slice": lambda: k[:, :, : length // 2]}, calls, repeat)
    finally:
        mx.fast.cuda_kernel, ws.map_input = real["cuda_kernel"], real["map_input"]
        _clear(mods)
    return [{"config": name, "kernel": names[name], "call_s": times[name], "slice_s": times["slice"],
             "call_in_slices": times[name] / times["slice"]} for name in fns]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--calls", type=int, default=3000)
    ap.add_argument("--repeat", type=int, default=15)
    ap.add_argument("--out", default=None, help="directory for prefill-host-work-*.json (default: print only)")
    args = ap.parse_args()
    if args.calls < 1 or args.repeat < 1:
        raise SystemExit("prefill_host_work: --calls and --repeat must be at least 1")
    from ksearch.backends import get_backend
    from ksearch.bench.results import make_result, write_result
    from ksearch.kernels import device

    real = device.backend, device.cuda_sm_count
    device.backend = lambda: "cuda"  # type: ignore[assignment]
    device.cuda_sm_count = lambda: 132  # type: ignore[assignment]  # the H200's, for the persistent grid
    try:
        figures = measure(args.calls, args.repeat)
    finally:
        device.backend, device.cuda_sm_count = real  # type: ignore[assignment]
    for row in figures:
        print(f"{row['config']:>17} ({row['kernel']}): {row['call_s'] * 1e6:6.2f} us a call, "
              f"{row['call_in_slices']:6.2f} slices of K (a slice {row['slice_s'] * 1e6:.2f} us)", flush=True)
    if args.out:
        b, hq, hkv, length, d = SHAPE
        data = make_result("prefill-host-work", get_backend("mlx-cpu"), figures, [[b, hq, hkv, length, d]],
                           ["float16"], notes="attention() with MLX's custom-kernel calls and the tensor map stubbed: "
                                              "the package's Python work a call; best of --repeat loops")
        print(write_result(data, args.out), flush=True)


if __name__ == "__main__":
    main()
