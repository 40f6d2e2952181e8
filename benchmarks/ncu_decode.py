"""Decode calls for Nsight Compute: MLX's attention on the cache slices, the library decode and the decode with other
configurations (split-K's, or the tensor-core kernel's as `mma:...`), each called twice at every shape (the first call
compiles), so that ncu lists every kernel a call launches and its duration:

    ncu --metrics gpu__time_duration.sum,launch__grid_size,launch__registers_per_thread --csv --log-file OUT.csv \\
        python benchmarks/ncu_decode.py [--shapes 1x16384,1x32768,16x16384] [--configs min_chunk=1024 ...]

Hq 32, Hkv 8, D 128, fp16, capacity = length + 256. ncu runs the kernels at base clocks with the caches flushed, so
its durations compare kernels with each other, not with `ksearch bench decode`'s wall times. The calls are in the
order printed (`MARK B L name` before each shape and contender's second call).
"""

from __future__ import annotations

import argparse
from collections.abc import Callable

import mlx.core as mx

from ksearch.bench.attention import parse_batch_lengths
from ksearch.kernels.decode import decode, native_decode, parse_config
from ksearch.kernels.decode.cuda_cluster import ClusterConfig
from ksearch.kernels.decode.cuda_split_k import DecodeConfig


def contenders(q: mx.array, kc: mx.array, vc: mx.array, length: int,
               configs: list[DecodeConfig | ClusterConfig]) -> dict[str, Callable[[], mx.array]]:
    calls: dict[str, Callable[[], mx.array]] = {"native": lambda: native_decode(q, kc, vc, length),
                                                "default": lambda: decode(q, kc, vc, length)}
    for cfg in configs:
        calls[repr(cfg)] = lambda c=cfg: decode(q, kc, vc, length, config=c)
    return calls


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--shapes", default="1x16384,1x32768,16x16384", help="BxLENGTH,...")
    ap.add_argument("--configs", nargs="*", default=["min_chunk=1024"], help="configurations besides the default: split-K's (ring=0) or the tensor-core kernel's (mma:producers=0)")
    args = ap.parse_args()
    try:
        shapes = parse_batch_lengths(args.shapes)
        configs = [parse_config(c) for c in args.configs]
    except ValueError as exc:
        raise SystemExit(f"ncu_decode: {exc} (shapes as 1x16384,16x16384; configurations as min_chunk=1024 or mma:producers=0)") from None
    mx.random.seed(0)
    for b, length in shapes:
        q = mx.random.normal((b, 32, 1, 128)).astype(mx.float16)
        kc = mx.random.normal((b, 8, length + 256, 128)).astype(mx.float16)
        vc = mx.random.normal((b, 8, length + 256, 128)).astype(mx.float16)
        mx.eval(q, kc, vc)
        for name, fn in contenders(q, kc, vc, length, configs).items():
            mx.eval(fn())
            mx.synchronize()
            print(f"MARK {b} {length} {name}", flush=True)
            mx.eval(fn())
            mx.synchronize()


if __name__ == "__main__":
    main()
