"""Host time of one decode call by how its MLX custom-kernel calls are made: the kernel's template arguments passed
with every call (MLX's usual way, which formats each into the kernel's name and text on every call) or written into
the kernel's text as constants (the library's way since it was measured here, kernel_text.constant_lines).

At B 1 a decode call is host-bound on both sides (benchmarks/results/decode-stream-*.json), so every microsecond of
it is one a caller waits for. B 1, Hq 32, Hkv 8, D 128, fp16, the library's split-K configuration; per variant:

    split, constants in its text     the library's call
    split, template arguments        the same kernel text, its seven template arguments passed with the call
    split, 12-byte body              the template arguments passed, a body of one statement (the text's share)
    merge, both ways; MLX's slice of K; decode() and native whole

each built 2,000 times (nothing evaluated), and whole calls (slice, split, merge) queued ten at a time, chained as
`ksearch bench decode` times them: the library's `decode()`, the same kernels with their template arguments passed
each call, and native. Rounds in turn, the best of five kept.

    python benchmarks/decode_host_time.py OUT_DIR [--lengths 4096,16384]

Writes decode-host-time-*.json (ksearch-bench/1). MLX-CUDA only (custom kernels).
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from typing import Any


def queued_us(fn: Callable[[], Any], seconds: float = 0.3, n: int = 10) -> float:
    """A call's share of rounds of n calls built, then evaluated and waited for."""
    import mlx.core as mx

    rounds, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < seconds:
        out = None
        for _ in range(n):
            out = fn()
        mx.eval(out)
        mx.synchronize()
        rounds += 1
    return (time.perf_counter() - t0) / (rounds * n) * 1e6


def measure(length: int) -> list[dict[str, Any]]:
    """One B 1 length's rows: every variant's build time, the whole calls queued, and the check."""
    import mlx.core as mx

    from ksearch.bench.attention import chained, decode_caches, decode_inputs
    from ksearch.bench.timing import build_us
    from ksearch.kernels.decode import DecodeConfig, decode, native_decode
    from ksearch.kernels.decode import cuda_split_k as ck
    from ksearch.kernels.decode.cuda_split_k_text import HEADER, MERGE_SOURCE, SPLIT_RING_SOURCE, SPLIT_SOURCE
    from ksearch.kernels.kernel_text import cuda_kernel

    shape = {"B": 1, "Hq": 32, "Hkv": 8, "D": 128, "length": length, "capacity": length + 256, "dtype": "float16"}
    q, kc, vc = decode_inputs(shape)
    launch = ck.launch_for(q, kc, vc)
    assert launch is not None and isinstance(launch.cfg, DecodeConfig) and not launch.cfg.min_blocks
    split, merge = launch.kernels()
    mx.eval(decode(q, kc, vc, length))  # the split arguments for this length, kept by the launch
    a, m = launch.split_args[launch.nsplit(length)], launch.merge
    ta, tm = {**a, "template": launch.template}, {**m, "template": [("T", q.dtype), ("D", 128), ("G", launch.g)]}
    split_t = cuda_kernel(name="host_time_split_template", input_names=["q", "k", "v"],
                          output_names=["part_acc", "part_ml"],
                          source=SPLIT_RING_SOURCE if launch.cfg.ring else SPLIT_SOURCE, header=HEADER,
                          ensure_row_contiguous=False)
    merge_t = cuda_kernel(name="host_time_merge_template", input_names=["part_acc", "part_ml"], output_names=["o"],
                          source=MERGE_SOURCE)
    tiny = cuda_kernel(name="host_time_split_tiny", input_names=["q", "k", "v"],
                       output_names=["part_acc", "part_ml"], source="part_ml[0] = 0.f;", ensure_row_contiguous=False)
    ks = kc[:, :, :length]
    pz = [mx.zeros((1,)), mx.zeros((1,))]

    def template_call(qq: Any, k: Any, v: Any) -> Any:
        acc, ml = split_t(inputs=[qq, k[:, :, :length], v], **ta)
        return merge_t(inputs=[acc, ml], **tm)[0]

    builds = {
        "split, constants in its text (the library)": lambda: split(inputs=[q, ks, vc], **a),
        "split, template arguments": lambda: split_t(inputs=[q, ks, vc], **ta),
        "split, 12-byte body, template arguments": lambda: tiny(inputs=[q, ks, vc], **ta),
        "merge, constants in its text (the library)": lambda: merge(inputs=pz, **m),
        "merge, template arguments": lambda: merge_t(inputs=pz, **tm),
        "slice of K": lambda: kc[:, :, :length],
        "decode() (the library)": lambda: decode(q, kc, vc, length),
        "decode_with (the launch kept)": lambda: ck.decode_with(launch, q, kc, vc, length),
        "template arguments each call": lambda: template_call(q, kc, vc),
        "native": lambda: native_decode(q, kc, vc, length),
    }
    ref = native_decode(q, kc, vc, length).astype(mx.float32)
    errs = {name: mx.abs(out.astype(mx.float32) - ref).max().item()
            for name, out in (("decode() (the library)", decode(q, kc, vc, length)),
                              ("template arguments each call", template_call(q, kc, vc)))}
    caches = decode_caches(shape, kc, vc)
    whole = {"decode() (the library)": chained(lambda qq, k, v: decode(qq, k, v, length), q, caches),
             "template arguments each call": chained(template_call, q, caches),
             "native": chained(lambda qq, k, v: native_decode(qq, k, v, length), q, caches)}
    best: dict[tuple[str, str], float] = {}
    for _ in range(5):
        for name, fn in builds.items():
            best[(name, "build")] = min(best.get((name, "build"), float("inf")), build_us(fn))
        for name, fn in whole.items():
            key = (name, "queued:10 chained")
            best[key] = min(best.get(key, float("inf")), queued_us(fn))
    rows: list[dict[str, Any]] = []
    for (name, mode), us in best.items():
        rows.append({"B": 1, "length": length, "what": name, "mode": mode, "us": round(us, 2)})
        print(f"L {length:>6} {mode:<18} {name:<44} {us:7.2f} us", flush=True)
    for name, err in errs.items():
        rows.append({"B": 1, "length": length, "what": name, "mode": "max |diff| against native", "us": None,
                     "max_abs_diff": err})
        print(f"L {length:>6} {name}: max |diff| against native {err:.2e}", flush=True)
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out", help="directory for decode-host-time-*.json")
    ap.add_argument("--lengths", default="4096,16384", help="B 1 cache lengths where split-K runs, comma-separated")
    args = ap.parse_args()
    try:
        lengths = [int(x) for x in args.lengths.split(",")]
    except ValueError:
        lengths = []
    if not lengths or min(lengths) < 1:
        raise SystemExit(f"decode_host_time: --lengths {args.lengths!r}: give positive lengths as 4096,16384")
    import mlx.core as mx

    if not mx.cuda.is_available():
        raise SystemExit("decode_host_time: MLX here has no CUDA device; run this on the CUDA machine")
    from ksearch.backends import get_backend
    from ksearch.bench.results import make_result, write_result

    rows = [row for length in lengths for row in measure(length)]
    data = make_result("decode-host-time", get_backend(None), rows, [[1, n] for n in lengths], ["float16"], {},
                       "host microseconds a call: build = graph building only (2,000 calls, nothing evaluated); "
                       "queued:10 chained = rounds of ten dependent calls built, evaluated and waited for; best of 5")
    print("wrote", write_result(data, args.out), flush=True)


if __name__ == "__main__":
    main()
