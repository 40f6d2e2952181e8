"""Decode calls in a sustained stream, with the board's power, SM clock and throttle reasons sampled by nvidia-smi.

Nsight Compute times one kernel at a time, the board idle around it; a decode step in a model, and `ksearch bench
decode`, run the calls back to back, where a memory-bound kernel at B 8-16 can hold the board at its power limit and
the clock drops. Per shape and contender (MLX's attention on the cache slices, the library decode, its split
kernel without the merge, other split-K configurations, the tensor-core kernel): ten calls queued before each
evaluation for SECONDS after WARM seconds of the same stream, the time a call, and over that window the median and
largest power, the median SM clock, the share of samples in which the driver reported the software power cap
(throttle reason bit 0x4), and from them the board's energy a call and the K/V bytes read per joule (the whole
board's, idle draw included). Beside it, one call waited for alone (the median of 30). Files made before the warm-up
existed: `--warm 0`.

    python benchmarks/decode_power.py OUT_DIR [--shapes 16x16384,1x4096] [--seconds 2] [--warm 1]
                                      [--configs ring=0 mma ...]

Hq 32, Hkv 8, D 128, fp16, capacity = length + 256. Writes decode-power-*.json to OUT_DIR.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import threading
import time
from collections.abc import Callable
from typing import Any

POWER_CAP = 0x4  # nvmlClocksThrottleReasonSwPowerCap
QUERY = "power.draw,clocks.sm,clocks_event_reasons.active"


def parse_sample(line: str, at: float) -> tuple[float, float, float, int] | None:
    """One `nvidia-smi --format=csv,noheader,nounits` line of QUERY -> (time, watts, MHz, reasons); None where the
    driver reports a field as unavailable."""
    try:
        watts, mhz, reasons = (x.strip() for x in line.split(","))
        return at, float(watts), float(mhz), int(reasons, 16)
    except ValueError:
        return None


def window_stats(samples: list[tuple[float, float, float, int]], start: float, end: float) -> dict[str, Any]:
    """Power, clock and power-cap share over the samples taken in [start, end]."""
    inside = [s for s in samples if start <= s[0] <= end]
    if not inside:
        return {"samples": 0}
    return {"samples": len(inside), "power_w_median": statistics.median(s[1] for s in inside),
            "power_w_max": max(s[1] for s in inside), "sm_mhz_median": statistics.median(s[2] for s in inside),
            "power_capped_share": sum(1 for s in inside if s[3] & POWER_CAP) / len(inside)}


class Sampler:
    """nvidia-smi every `period_ms`, each line stamped with this process's clock as it arrives."""

    def __init__(self, period_ms: int = 100) -> None:
        self.samples: list[tuple[float, float, float, int]] = []
        self._proc = subprocess.Popen(["nvidia-smi", f"--query-gpu={QUERY}", "--format=csv,noheader,nounits",
                                       f"-lms={period_ms}"], stdout=subprocess.PIPE, text=True)
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        assert self._proc.stdout is not None
        for line in self._proc.stdout:
            sample = parse_sample(line, time.time())
            if sample is not None:
                self.samples.append(sample)

    def stop(self) -> None:
        self._proc.terminate()
        self._proc.wait(timeout=10)


def refuse_stream(prog: str, seconds: float, warm: float) -> None:
    """Exits in one line where a stream cannot be measured: a window that is not positive, a negative warm-up, or no
    nvidia-smi to sample the board (prefill_power.py uses it too)."""
    if not seconds > 0 or not warm >= 0:
        raise SystemExit(f"{prog}: --seconds {seconds} --warm {warm}: give a positive window and a warm-up of 0 or more "
                         "seconds")
    if shutil.which("nvidia-smi") is None:
        raise SystemExit(f"{prog}: nvidia-smi is not on the PATH; run this on the CUDA machine")


def contenders(q: Any, kc: Any, vc: Any, length: int, configs: list[Any]) -> dict[str, Callable[[], Any]]:
    from ksearch.kernels.decode import decode, native_decode
    from ksearch.kernels.decode.cuda_split_k import launch_for, split_partials

    launch = launch_for(q, kc, vc)  # the library's configuration
    assert launch is not None, "the library's split-K kernel does not take these shapes"
    calls: dict[str, Callable[[], Any]] = {
        "native": lambda: native_decode(q, kc, vc, length),
        "library": lambda: decode(q, kc, vc, length),
        "library split kernel alone": lambda: split_partials(launch, q, kc, vc, length)[0]}
    for cfg in configs:
        calls[repr(cfg)] = lambda c=cfg: decode(q, kc, vc, length, config=c)
    return calls


def sustained(fn: Callable[[], Any], seconds: float, warm: float = 1.0) -> tuple[float, float, float]:
    """(time a call, window start, window end), ten calls queued before each evaluation. The same stream runs `warm`
    seconds before the window opens: nvidia-smi's power.draw is an average over about a second, so a window opened as
    a contender starts reads some of the one before it (the first round's first contender read 320-374 W where the
    second round's read 636-694 W, decode-power-*.json of 2026-12-04)."""
    import mlx.core as mx

    mx.eval([fn() for _ in range(10)])
    t_warm = time.perf_counter()
    while time.perf_counter() - t_warm < warm:
        mx.eval([fn() for _ in range(10)])
    mx.synchronize()
    start = time.time()
    t0, n = time.perf_counter(), 0
    while time.perf_counter() - t0 < seconds:
        mx.eval([fn() for _ in range(10)])
        n += 10
    mx.synchronize()
    return (time.perf_counter() - t0) / n, start, time.time()


def waited(fn: Callable[[], Any], reps: int = 30) -> float:
    import mlx.core as mx

    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        mx.eval(fn())
        mx.synchronize()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out", help="directory for decode-power-*.json")
    ap.add_argument("--shapes", default="16x16384,8x16384,1x4096", help="BxLENGTH,...")
    ap.add_argument("--seconds", type=float, default=2.0, help="sustained stream per contender and shape")
    ap.add_argument("--warm", type=float, default=1.0,
                    help="seconds of the same stream before each window opens (power.draw is a ~1 s average)")
    ap.add_argument("--configs", nargs="*", default=["ring=0", "mma"],
                    help="split-K configurations besides the library's; `mma[:FIELD=VALUE,...]` the tensor-core kernel")
    args = ap.parse_args()
    from ksearch.bench.attention import decode_inputs, parse_batch_lengths
    from ksearch.kernels.decode import parse_config

    try:
        shapes = parse_batch_lengths(args.shapes)
        configs = [parse_config(c) for c in args.configs]
    except ValueError as exc:
        raise SystemExit(f"decode_power: {exc} (configurations as ring=0,unroll=2 or mma:consumers=4)") from None
    refuse_stream("decode_power", args.seconds, args.warm)

    from ksearch.backends import get_backend
    from ksearch.bench.results import make_result, write_result

    sampler = Sampler()
    figures = []
    try:
        for b, length in shapes:
            q, kc, vc = decode_inputs({"B": b, "Hq": 32, "Hkv": 8, "D": 128, "capacity": length + 256,
                                       "dtype": "float16"})
            kv = 2 * b * 8 * length * 128 * 2
            for rnd in range(2):  # two rounds in turn: the second shows whether the first one's order mattered
                for name, fn in contenders(q, kc, vc, length, configs).items():
                    per_call, start, end = sustained(fn, args.seconds, args.warm)
                    row = {"B": b, "length": length, "contender": name, "round": rnd, "per_call_s": per_call,
                           "waited_s": waited(fn), "tbs": kv / per_call / 1e12,
                           **window_stats(sampler.samples, start, end)}
                    if "power_w_median" in row:  # the board's energy a call, and K/V bytes read per joule
                        row["joules_per_call"] = row["power_w_median"] * per_call
                        row["gb_per_joule"] = kv / 1e9 / row["joules_per_call"]
                    figures.append(row)
                    print(f"{b:>2} {length:>6} {name[:48]:<48} {per_call * 1e6:7.1f} us  {row['tbs']:.2f} TB/s  "
                          f"{row.get('power_w_median', 0):5.0f} W  {row.get('sm_mhz_median', 0):5.0f} MHz  "
                          f"capped {row.get('power_capped_share', 0):.0%}", flush=True)
    finally:
        sampler.stop()
    data = make_result("decode-power", get_backend("mlx-cuda"), figures, [list(s) for s in shapes], ["float16"],
                       notes=f"ten calls queued per evaluation for {args.seconds} s per contender after {args.warm} s of "
                             "the same stream; nvidia-smi every "
                             "100 ms; power_capped_share: samples with throttle reason 0x4 (software power cap)")
    print(write_result(data, args.out), flush=True)


if __name__ == "__main__":
    main()
