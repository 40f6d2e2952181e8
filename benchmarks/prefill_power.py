"""Prefill calls in a sustained stream, the library's beside cuDNN's, with the board's power, SM clock and power cap
sampled by nvidia-smi (decode_power.py's sampler and stream).

A prefill at D=128 keeps the tensor cores busy for milliseconds a call; run back to back the board can reach its power
limit and lower the SM clock, so a kernel that spends more energy a tile runs at a lower clock than its rival, which
cycles a tile counted inside the kernel (prefill_item_trace.py) do not show. Per shape and contender, in two rounds
(cuDNN, the library's dispatch, and any configurations named with --configs): the time a call over SECONDS after WARM
seconds of the same stream, the median power and SM clock over that window, the share of samples under the software
power cap, the board's energy a call, and the call's time in SM cycles at the median clock (what separates a slower
kernel from a lower clock).

    python benchmarks/prefill_power.py OUT_DIR [--shapes 1x4096,4x4096,1x8192,4x8192] [--causal] [--seconds 2]
                                       [--warm 1] [--configs ws3_n64_s4_p4_tmas_cr,...]

Hq 32, Hkv 8, D 128, fp16, S = L. Writes prefill-power-*.json (prefill-power-causal-*.json with --causal) to OUT_DIR.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

from decode_power import Sampler, refuse_stream, sustained, waited, window_stats


def prefill_flops(b: int, length: int, causal: bool, hq: int = 32, d: int = 128) -> float:
    """The two products' multiply-adds as operations (4 B Hq L S D), halved with the causal mask."""
    full = 4.0 * b * hq * length * length * d
    return full / 2 if causal else full


def contenders(q: Any, k: Any, v: Any, causal: bool, configs: list[Any]) -> dict[str, Callable[[], Any]]:
    """cuDNN, the library's dispatch and each configuration of `configs`, each named with the kernel it runs here (a
    configuration that does not fit the shape runs native, and says so)."""
    from ksearch.kernels.attention import attention, native_attention, prefill_plan
    from ksearch.kernels.attention.wgmma_ws import config_name

    name = prefill_plan(q, k, v, causal)[0]
    calls: dict[str, Callable[[], Any]] = {"native": lambda: native_attention(q, k, v, causal),
                                           f"library ({name})": lambda: attention(q, k, v, causal)}
    for cfg in configs:
        calls[f"{config_name(cfg)} ({prefill_plan(q, k, v, causal, config=cfg)[0]})"] = (
            lambda c=cfg: attention(q, k, v, causal, config=c))
    return calls


def row_for(b: int, length: int, causal: bool, name: str, rnd: int, per_call: float, waited_s: float,
            window: dict[str, Any]) -> dict[str, Any]:
    """One contender's figures: time and rate a call, the window's power and clock, and what they imply."""
    row: dict[str, Any] = {"B": b, "L": length, "causal": causal, "contender": name, "round": rnd,
                           "per_call_s": per_call, "waited_s": waited_s,
                           "tflops": prefill_flops(b, length, causal) / per_call / 1e12, **window}
    if "power_w_median" in row:
        row["joules_per_call"] = row["power_w_median"] * per_call
        row["mcycles_per_call"] = row["sm_mhz_median"] * per_call  # MHz x s = millions of SM cycles
    return row


def result_name(causal: bool) -> str:
    """The result's name: with and without the mask apart, so one call does not overwrite the other's file."""
    return "prefill-power-causal" if causal else "prefill-power"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out", help="directory for prefill-power-*.json")
    ap.add_argument("--shapes", default="1x4096,4x4096,1x8192,4x8192", help="BxL,...")
    ap.add_argument("--causal", action="store_true")
    ap.add_argument("--configs", default="",
                    help="comma-separated wgmma configurations to time besides the dispatch (e.g. ws3_n64_s4_p4_tmas_cr)")
    ap.add_argument("--seconds", type=float, default=2.0, help="sustained stream per contender and shape")
    ap.add_argument("--warm", type=float, default=1.0,
                    help="seconds of the same stream before each window opens (power.draw is a ~1 s average)")
    args = ap.parse_args()
    from ksearch.bench.attention import parse_batch_lengths
    from ksearch.kernels.attention.wgmma_ws import parse_config

    try:
        shapes = parse_batch_lengths(args.shapes)
        configs = [parse_config(c) for c in args.configs.split(",") if c.strip()]
    except ValueError as exc:
        raise SystemExit(f"prefill_power: {exc}") from None
    refuse_stream("prefill_power", args.seconds, args.warm)

    import mlx.core as mx

    from ksearch.backends import get_backend
    from ksearch.bench.attention import prefill_inputs
    from ksearch.bench.results import make_result, write_result

    sampler = Sampler()
    figures = []
    try:
        for b, length in shapes:
            q, k, v = prefill_inputs((b, 32, length, 128), (b, 8, length, 128), mx.float16)
            for rnd in range(2):  # two rounds in turn: the second shows whether the first one's order mattered
                for name, fn in contenders(q, k, v, args.causal, configs).items():
                    per_call, start, end = sustained(fn, args.seconds, args.warm)
                    row = row_for(b, length, args.causal, name, rnd, per_call, waited(fn, reps=10),
                                  window_stats(sampler.samples, start, end))
                    figures.append(row)
                    print(f"{b:>2} {length:>6} {name[:44]:<44} {per_call * 1e6:8.1f} us  {row['tflops']:5.0f} TFLOP/s"
                          f"  {row.get('power_w_median', 0):5.0f} W  {row.get('sm_mhz_median', 0):5.0f} MHz  "
                          f"capped {row.get('power_capped_share', 0):.0%}  waited {row['waited_s'] * 1e6:8.1f} us",
                          flush=True)
    finally:
        sampler.stop()
    data = make_result(result_name(args.causal), get_backend("mlx-cuda"), figures, [list(s) for s in shapes], ["float16"],
                       notes=f"Hq 32, Hkv 8, D 128, causal={args.causal}; ten calls queued per evaluation for "
                             f"{args.seconds} s per contender after {args.warm} s of the same stream; nvidia-smi every "
                             "100 ms; power_capped_share: samples with throttle reason 0x4 (software power cap)")
    print(write_result(data, args.out), flush=True)


if __name__ == "__main__":
    main()
