"""Nsight Compute on wgmma prefill configurations side by side, one shape: each kernel's time and SM cycles at locked
clocks, its cycles a K / V tile (overheads included: elapsed cycles over the tiles an SM runs on average), its
instructions, tensor-pipe activity and warp stall reasons (cycles a warp waited per instruction issued, by reason),
and each reason's difference against the first configuration. Made to find where one kernel's cycles go that
another's do not (the persistent `WIDE` form ran its tiles about 5% slower than `WIDE` until its index arithmetic
moved to the uniform datapath, `_uw`: docs/kernels-attention.md).
With --source, each configuration's report is kept too (`ncu --section SourceCounters --section WarpStateStats`,
OUT/ncu-prefill-CONFIG.ncu-rep) with its SASS page as CSV (`ncu -i ... --page source --csv --print-source sass`:
stall samples per instruction), for reading in Nsight Compute or later.

    python benchmarks/ncu_prefill.py OUT [--configs A,B,...] [--shape BxL] [--d 128] [--causal] [--source]

Default: the dispatch's kernel at D=128 (`WIDE_PERSIST`) without and with `_uw`, B 1, L 4096, D 128, no mask (Hq
32, Hkv 8, fp16; the profiled program is benchmarks/ncu_attention.py). Needs MLX with CUDA and ncu
(KSEARCH_NCU, PATH or CUDA's default places). Writes OUT/ncu-prefill-*.json.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from prefill_tile_count import item_tiles

from ksearch.harness import ncu

HERE = Path(__file__).resolve().parent
#: Beyond the harness's metrics: the SM cycles of the launch, its instructions, and tensor activity over active cycles.
CYCLES = "sm__cycles_elapsed.max"
INSTRUCTIONS = "smsp__inst_executed.sum"
TENSOR_ACTIVE = "sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_active"
EXTRA = (CYCLES, INSTRUCTIONS, TENSOR_ACTIVE)
DEFAULT_CONFIGS = "ws3_n64_s4_p4_tmas_pst_preg32_cr_wt_sn,ws3_n64_s4_p4_tmas_pst_preg32_cr_wt_sn_uw"
HEADS, KV_HEADS, SMS = 32, 8, 132


def shape(text: str) -> tuple[int, int]:
    """`BxL` as (B, L); raises ValueError with the accepted form."""
    try:
        b, length = (int(x) for x in text.lower().split("x"))
    except ValueError:
        raise ValueError(f"--shape {text!r}: give BxL, e.g. 1x4096") from None
    if b < 1 or length < 1:
        raise ValueError(f"--shape {text!r}: B and L must be positive")
    return b, length


def tiles_per_sm(cfg: Any, b: int, length: int, causal: bool, sms: int = SMS) -> float:
    """The K / V tiles (block-tiles: every warpgroup of a block on one tile) an SM runs on average at this shape."""
    return sum(item_tiles(length, length, causal, 64 * cfg.wg, cfg.bn, b * HEADS)) / sms


def profile_command(exe: str, log_file: str, metrics: tuple[str, ...], b: int, length: int, d: int, causal: bool,
                    report: str | None = None) -> list[str]:
    """ncu on the second of the program's three calls (the first compiles), the prefill kernel only, at locked base
    clocks (cycles compare across configurations; durations are at base clock). With `report`, the SourceCounters
    and WarpStateStats sections go to that report file instead of the raw CSV."""
    head = [exe, "--clock-control", "base", "--graph-profiling", "node", "-k", "regex:ks_flash", "-s", "1", "-c", "1"]
    if report:
        head += ["--section", "SourceCounters", "--section", "WarpStateStats", "--import-source", "no", "-f",
                 "-o", report]
    else:
        head += ["--csv", "--page", "raw", "--metrics", ",".join(metrics), "--log-file", log_file]
    program = [sys.executable, str(HERE / "ncu_attention.py"), str(length), str(d), "causal" if causal else "full",
               "--batch", str(b)]
    return head + program


def row_for(name: str, text: str, tiles: float) -> dict[str, Any]:
    """One configuration's figures from its raw CSV; raises ValueError when ncu profiled no kernel."""
    kernels = ncu.parse_csv(text)
    if not kernels:
        raise ValueError(f"{name}: ncu profiled no prefill kernel")
    k = kernels[0]
    extra = (ncu.metric_values(text, EXTRA) or [{}])[0]
    row: dict[str, Any] = {"config": name, "kernel": ncu.short_name(k.name), "grid": k.grid, "block": k.block,
                           "duration_s": k.duration_s, "registers": k.registers, "tensor_pct": k.tensor_pct,
                           "tensor_active_pct": extra.get(TENSOR_ACTIVE), "cycles": extra.get(CYCLES),
                           "instructions": extra.get(INSTRUCTIONS), "tiles_per_sm": tiles,
                           "stalls": dict(sorted(k.stalls.items(), key=lambda kv: -kv[1]))}
    if row["cycles"] is not None and tiles > 0:
        row["cycles_per_tile"] = row["cycles"] / tiles
    return row


#: The table's figures: label, key, scale, format.
FIGURES = (("time at base clock, us", "duration_s", 1e6, "{:,.1f}"), ("SM cycles", "cycles", 1.0, "{:,.0f}"),
           ("cycles a tile", "cycles_per_tile", 1.0, "{:,.0f}"), ("instructions, M", "instructions", 1e-6, "{:,.2f}"),
           ("tensor pipe, % active", "tensor_active_pct", 1.0, "{:.1f}"), ("registers", "registers", 1.0, "{:.0f}"))


def compare(rows: list[dict[str, Any]]) -> str:
    """The side-by-side table: the figures, then every stall reason any configuration waits on (the first's largest
    first), with each one's difference against the first configuration."""
    width = max(24, *(len(r["config"]) for r in rows)) + 2
    lines = ["".ljust(26) + "".join(r["config"].rjust(width) for r in rows)]
    for label, key, scale, fmt in FIGURES:
        cells = [fmt.format(v * scale) if isinstance(v := r.get(key), (int, float)) else "-" for r in rows]
        lines.append(label.ljust(26) + "".join(c.rjust(width) for c in cells))
    first = rows[0]["stalls"]
    lines.append("stalls, cycles an issue (difference against the first)")
    for reason in sorted({s for r in rows for s in r["stalls"]}, key=lambda s: -first.get(s, 0.0)):
        cells = [f"{first.get(reason, 0.0):.3f}"]
        cells += [f"{(v := r['stalls'].get(reason, 0.0)):.3f} ({v - first.get(reason, 0.0):+.3f})" for r in rows[1:]]
        lines.append(f"  {reason}".ljust(26) + "".join(c.rjust(width) for c in cells))
    return "\n".join(lines)


def run_ncu(cmd: list[str], env: dict[str, str], timeout: float, log: Path | None = None) -> str:
    """ncu's output: stdout, stderr and its --log-file, where it writes its own lines; raises RuntimeError with ncu's
    one-line failure."""
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=timeout)
    out = done.stdout + done.stderr + (log.read_text() if log is not None and log.exists() else "")
    if ncu.unknown_metrics(out):
        return out  # the caller asks again without them
    failed = ncu.failure_line(out, then="")  # the benchmark stops here; nothing goes on without counters
    if done.returncode != 0 or failed:
        last = (out.strip().splitlines() or [""])[-1]
        raise RuntimeError(failed or f"ncu exited {done.returncode}: {last[:200]}")
    return out


def profile(exe: str, cfg_name: str, b: int, length: int, d: int, causal: bool, out: Path, source: bool,
            timeout: float = 240.0) -> dict[str, Any]:
    """One configuration through ncu: the raw counters (metrics ncu does not know left out and asked again), and with
    `source` its report and SASS page kept under `out`."""
    from ksearch.kernels.attention.wgmma_ws import parse_config

    cfg = parse_config(cfg_name)
    env = {**os.environ, "KSEARCH_WGMMA_CONFIG": cfg_name}
    log = out / f"ncu-prefill-{cfg_name}.csv"
    metrics = ncu.METRICS + EXTRA
    for _ in range(3):
        log.unlink(missing_ok=True)
        printed = run_ncu(profile_command(exe, str(log), metrics, b, length, d, causal), env, timeout, log)
        unknown = ncu.unknown_metrics(printed)
        if not unknown:
            break
        metrics = ncu.without(metrics, unknown)
    row = row_for(cfg_name, printed, tiles_per_sm(cfg, b, length, causal))
    if source:  # what fails here is recorded with the row, whose counters are already in hand
        report = out / f"ncu-prefill-{cfg_name}"
        try:
            run_ncu(profile_command(exe, "", (), b, length, d, causal, report=str(report)), env, timeout)
            row["report"] = f"{report.name}.ncu-rep"
            page = run_ncu([exe, "-i", f"{report}.ncu-rep", "--page", "source", "--csv", "--print-source", "sass"],
                           env, timeout)
            (out / f"ncu-prefill-{cfg_name}-sass.csv").write_text(page)
        except (RuntimeError, subprocess.TimeoutExpired) as exc:
            row["source_error"] = str(exc)
    return row


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("out", type=Path, help="directory for ncu-prefill-*.json (and the reports with --source)")
    ap.add_argument("--configs", default=DEFAULT_CONFIGS, help="wgmma configuration names, comma-separated")
    ap.add_argument("--shape", default="1x4096", help="BxL (Hq 32, Hkv 8, S = L)")
    ap.add_argument("--d", type=int, default=128, choices=(64, 128))
    ap.add_argument("--causal", action="store_true")
    ap.add_argument("--source", action="store_true", help="keep each report and its SASS page with stall samples")
    args = ap.parse_args(argv)
    from ksearch.kernels.attention.wgmma_ws import parse_config

    try:
        b, length = shape(args.shape)
        names = [n.strip() for n in args.configs.split(",") if n.strip()]
        for n in names:
            parse_config(n)
    except ValueError as exc:
        print(f"ncu_prefill: {exc}", file=sys.stderr)
        return 2
    exe = ncu.ncu_path()
    if exe is None:
        print("ncu_prefill: ncu (Nsight Compute) is not here: put it on PATH or set KSEARCH_NCU", file=sys.stderr)
        return 2
    from ksearch.backends import get_backend
    from ksearch.bench.results import make_result, write_result
    from ksearch.errors import BackendUnavailable

    try:
        backend = get_backend("mlx-cuda")
    except BackendUnavailable as exc:
        print(f"ncu_prefill: {exc}", file=sys.stderr)
        return 2
    args.out.mkdir(parents=True, exist_ok=True)
    rows, failed = [], []
    for n in names:  # a configuration that fails is named; the others' figures are still written
        try:
            rows.append(profile(exe, n, b, length, args.d, args.causal, args.out, args.source))
        except (RuntimeError, ValueError, subprocess.TimeoutExpired) as exc:
            print(f"ncu_prefill: {n}: {exc}", file=sys.stderr)
            failed.append(n)
            continue
        print(f"profiled {n}" + (f" (source: {rows[-1]['source_error']})" if "source_error" in rows[-1] else ""),
              flush=True)
    if not rows:
        return 1
    print(compare(rows), flush=True)
    tag = f"{'causal' if args.causal else 'full'}-b{b}-l{length}-d{args.d}"
    data = make_result("ncu-prefill", backend, rows, [[b, HEADS, KV_HEADS, length, args.d]], ["float16"],
                       notes=f"Nsight Compute at base clocks, the second of three calls, {tag}; stalls: cycles a "
                             "warp waited per issued instruction (smsp__average_warps_issue_stalled_*_per_issue_"
                             "active.ratio); cycles_per_tile: sm__cycles_elapsed.max over the tiles an SM runs on "
                             "average")
    print(write_result(data, args.out, stem=f"ncu-prefill-{tag}"), flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
