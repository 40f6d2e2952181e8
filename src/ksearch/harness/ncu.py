"""Nsight Compute (`ncu`): the command line the profiler runs with, its `--csv --page raw` output read back, and its
failures put in one line.

What is kept of a kernel launch (`KernelCounters`) and of a whole profiled call (`summarize`): achieved DRAM and L2
throughput as percentages of peak, SM and tensor-pipe utilisation, achieved occupancy and what limits it, the warp
stall reasons with their shares of all stalls, the L2 hit rate, and each kernel's share of the call's GPU time (so an
extra launch shows). The metric names are those Nsight Compute 2023-2025 uses on Hopper in its SpeedOfLight,
Occupancy, LaunchStats, MemoryWorkloadAnalysis, ComputeWorkloadAnalysis and WarpStateStats sections; the parser
finds each figure by name, so extra columns, a different column order and `n/a` values are all read.
"""

from __future__ import annotations

import csv
import glob
import io
import os
import re
import shutil
from dataclasses import asdict, dataclass, field
from typing import Any

#: Stall reasons as WarpStateStats names them: smsp__average_warps_issue_stalled_<reason>_per_issue_active.ratio.
STALL_REASONS = ("long_scoreboard", "short_scoreboard", "barrier", "mio_throttle", "lg_throttle", "math_pipe_throttle",
                 "wait", "not_selected", "selected", "no_instruction", "membar", "branch_resolving", "dispatch_stall",
                 "drain", "imc_miss", "misc", "sleeping", "tex_throttle")
#: Not a stall: the warp was issuing ("selected"); left out of the stall shares.
_NOT_STALLS = frozenset({"selected"})
_STALL = "smsp__average_warps_issue_stalled_{}_per_issue_active.ratio"
OCCUPANCY_LIMITS = ("blocks", "registers", "shared_mem", "warps", "barriers")

DURATION = "gpu__time_duration.sum"
DRAM = "dram__throughput.avg.pct_of_peak_sustained_elapsed"
L2 = "lts__throughput.avg.pct_of_peak_sustained_elapsed"
SM = "sm__throughput.avg.pct_of_peak_sustained_elapsed"
TENSOR = "sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_elapsed"
OCCUPANCY = "sm__warps_active.avg.pct_of_peak_sustained_active"
THEORETICAL_OCCUPANCY = "sm__maximum_warps_per_active_cycle_pct"
L2_HIT = "lts__t_sector_hit_rate.pct"
REGISTERS = "launch__registers_per_thread"

#: The targeted metric list (`--metrics`): nothing else is collected, which keeps the replay passes few.
METRICS: tuple[str, ...] = (
    DURATION, DRAM, L2, SM, TENSOR, OCCUPANCY, THEORETICAL_OCCUPANCY, L2_HIT, REGISTERS,
    "launch__grid_size", "launch__block_size", "launch__shared_mem_per_block",
    *(f"launch__occupancy_limit_{x}" for x in OCCUPANCY_LIMITS),
    *(_STALL.format(r) for r in STALL_REASONS),
)

#: What ncu prints when it cannot read the counters or cannot start, and what the user is told it means (the caller
#: adds what happens next: failure_line's `then`).
_FAILURES = (
    ("ERR_NVGPUCTRPERM", "ncu has no permission to read the GPU's performance counters (ERR_NVGPUCTRPERM): allow "
     "them for all users (NVreg_RestrictProfilingToAdminUsers=0) to get counters"),
    ("LibraryNotLoaded", "ncu could not load its profiling library (Failed to initialize the profiler: "
     "LibraryNotLoaded): check the Nsight Compute installation"),
    ("Failed to initialize the profiler", "ncu failed to initialise the profiler"),
    ("No kernels were profiled", "ncu profiled no kernel of the candidate's calls"),
    ("nsight-compute directory is not found", "ncu's launcher found no Nsight Compute installation from inside the "
     "sandbox: set KSEARCH_NCU to the ncu inside the nsight-compute folder"),
)


#: Where CUDA installs put ncu when it is not on PATH.
DEFAULT_DIRS = ("/usr/local/cuda/bin", "/opt/nvidia/nsight-compute")


def ncu_path() -> str | None:
    """The Nsight Compute CLI: KSEARCH_NCU, else `ncu` on PATH, else CUDA's default places."""
    named = os.environ.get("KSEARCH_NCU")
    if named:
        return installation(named) if os.path.isfile(named) and os.access(named, os.X_OK) else None
    found = shutil.which("ncu")
    if found:
        return installation(found)
    for d in DEFAULT_DIRS:
        cand = os.path.join(d, "ncu")
        if os.path.isfile(cand) and os.access(cand, os.X_OK):
            return installation(cand)
    return None


def _version(path: str) -> tuple[int, ...]:
    return tuple(int(n) for n in re.findall(r"\d+", os.path.basename(os.path.dirname(path))))


def installation(exe: str) -> str:
    """The `ncu` inside the Nsight Compute folder that a CUDA toolkit's `bin/ncu` launcher would pick (the newest of
    <toolkit>/nsight-compute-*/ and /opt/nvidia/nsight-compute/*/), links resolved; `exe` itself when it is already
    there or no folder is found. The launcher looks for that folder when it starts, which inside the sandbox it
    cannot do where the folder lies outside what the sandbox lets it read (on the H200 it printed "nsight-compute
    directory is not found"); started directly, the folder is known and made readable (sandbox.plan)."""
    real = os.path.realpath(exe)
    if os.path.basename(os.path.dirname(real)).startswith("nsight-compute"):
        return real
    toolkits = {os.path.dirname(os.path.dirname(os.path.abspath(exe))), os.path.dirname(os.path.dirname(real))}
    patterns = [os.path.join(t, "nsight-compute*", "ncu") for t in sorted(toolkits)]
    patterns += ["/opt/nvidia/nsight-compute/*/ncu", "/opt/nvidia/nsight-compute*/ncu"]
    found = [os.path.realpath(c) for pattern in patterns for c in glob.glob(pattern)
             if os.path.isfile(c) and os.access(c, os.X_OK)]
    return max(found, key=_version) if found else exe


def command(ncu: str, log_file: str, launch_count: int = 64, metrics: tuple[str, ...] = METRICS) -> list[str]:
    """ncu's arguments before the profiled program. The clocks are left as they are (`--clock-control none`: the
    timed verdict ran at the GPU's own clocks); only launches between cuProfilerStart and cuProfilerStop are
    profiled (`--profile-from-start off`), each kernel of a CUDA graph as its own launch; the results go to
    `log_file` as raw CSV, away from what the program prints."""
    return [ncu, "--clock-control", "none", "--profile-from-start", "off", "--graph-profiling", "node",
            "--target-processes", "all", "--launch-count", str(launch_count), "--csv", "--page", "raw",
            "--metrics", ",".join(metrics), "--log-file", log_file]


_UNKNOWN_METRIC = re.compile(r"Failed to find metric (?:regex:)?\^?([A-Za-z0-9_]+)")


def unknown_metrics(output: str) -> set[str]:
    """The metrics this ncu does not know, by their base name (ncu: "Failed to find metric regex:^NAME\\.(...)$");
    names change between Nsight Compute versions and chips."""
    return set(_UNKNOWN_METRIC.findall(output))


def without(metrics: tuple[str, ...], unknown: set[str]) -> tuple[str, ...]:
    """`metrics` less those whose base name (before the first '.') is unknown."""
    return tuple(m for m in metrics if m.split(".")[0] not in unknown and m not in unknown)


def failure_line(output: str, then: str = "the run goes on without counters") -> str | None:
    """The one line for an ncu run that gave no counters, from what it printed, ending in `then` (what the caller does
    next; empty for nothing); None when nothing says it failed."""
    cause = next((line for marker, line in _FAILURES if marker in output), None)
    if cause is None:
        errors = [ln.strip() for ln in output.splitlines() if ln.startswith("==ERROR==")]
        if not errors:
            return None
        cause = f"ncu failed ({errors[0][9:].strip()[:200]})"
    return f"{cause}; {then}" if then else cause


# -- parsing --------------------------------------------------------------------------------------------------------

@dataclass
class KernelCounters:
    """One profiled kernel launch."""

    name: str
    duration_s: float | None = None
    dram_pct: float | None = None
    l2_pct: float | None = None
    sm_pct: float | None = None
    tensor_pct: float | None = None
    occupancy_pct: float | None = None
    theoretical_occupancy_pct: float | None = None
    occupancy_limiter: str | None = None  # registers | shared_mem | warps | blocks | barriers
    l2_hit_pct: float | None = None
    registers: float | None = None
    grid: str = ""
    block: str = ""
    stalls: dict[str, float] = field(default_factory=dict)  # reason -> cycles per issued instruction

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


_TIME_UNITS = {"nsecond": 1e-9, "ns": 1e-9, "usecond": 1e-6, "us": 1e-6, "msecond": 1e-3, "ms": 1e-3,
               "second": 1.0, "s": 1.0}


def _number(text: str | None) -> float | None:
    """A figure as ncu prints it: `1,234.5`, `n/a`, empty, or a number."""
    if text is None:
        return None
    t = text.strip().replace(",", "")
    if not t or t.lower() in ("n/a", "nan", "-"):
        return None
    try:
        return float(t)
    except ValueError:
        return None


def _table(text: str) -> list[list[str]]:
    """The CSV rows of ncu's output, from the header row (it starts with "ID") on; ncu's own `==PROF==` and
    `==WARNING==` lines and the program's prints around it are skipped."""
    lines = text.splitlines()
    start = next((i for i, ln in enumerate(lines) if ln.startswith('"ID"')), None)
    if start is None:
        return []
    body = [ln for ln in lines[start:] if ln.startswith('"')]
    return [row for row in csv.reader(io.StringIO("\n".join(body))) if row]


def parse_csv(text: str) -> list[KernelCounters]:
    """Every kernel launch in ncu's `--csv --page raw` output: a header row of column names, a row of units (empty
    for the identifying columns), then one row per launch. Raises ValueError when there is no such table."""
    rows = _table(text)
    if len(rows) < 2:
        raise ValueError("no ncu raw-page CSV table (a header row starting with \"ID\") in the output")
    header, units = rows[0], rows[1]
    col = {name: i for i, name in enumerate(header)}
    if "Kernel Name" not in col:
        raise ValueError("the ncu CSV has no \"Kernel Name\" column")
    # The units row is optional in spirit: a row whose identifying columns hold values is a launch, not units.
    if units and units[0].strip():
        units, data = [""] * len(header), rows[1:]
    else:
        data = rows[2:]
    out = []
    for row in data:
        if len(row) < len(header):
            row = row + [""] * (len(header) - len(row))

        def get(name: str, row: list[str] = row) -> float | None:
            return _number(row[col[name]]) if name in col else None

        k = KernelCounters(name=row[col["Kernel Name"]].strip())
        dur = get(DURATION)
        if dur is not None:
            unit = units[col[DURATION]].strip().lower() if col[DURATION] < len(units) else ""
            k.duration_s = dur * _TIME_UNITS.get(unit, 1e-9)
        k.dram_pct, k.l2_pct, k.sm_pct, k.tensor_pct = get(DRAM), get(L2), get(SM), get(TENSOR)
        k.occupancy_pct, k.theoretical_occupancy_pct = get(OCCUPANCY), get(THEORETICAL_OCCUPANCY)
        k.l2_hit_pct, k.registers = get(L2_HIT), get(REGISTERS)
        k.grid = row[col["Grid Size"]] if "Grid Size" in col else ""
        k.block = row[col["Block Size"]] if "Block Size" in col else ""
        limits = {x: v for x in OCCUPANCY_LIMITS if (v := get(f"launch__occupancy_limit_{x}")) is not None}
        if limits:
            # The limiter is the resource that allows the fewest blocks per SM (ncu's own reading of the section).
            k.occupancy_limiter = min(limits, key=lambda x: (limits[x], OCCUPANCY_LIMITS.index(x)))
        for name, i in col.items():
            m = re.fullmatch(r"smsp__average_warps_issue_stalled_(\w+?)_per_issue_active\.ratio", name)
            if m:
                v = _number(row[i])
                if v is not None and v > 0 and m.group(1) not in _NOT_STALLS:
                    k.stalls[m.group(1)] = v
        out.append(k)
    return out


def metric_values(text: str, names: tuple[str, ...]) -> list[dict[str, float]]:
    """The named metrics of every launch in ncu's `--csv --page raw` output, those present and numeric (for metrics
    KernelCounters does not keep, e.g. a benchmark's cycle and instruction counts)."""
    rows = _table(text)
    if len(rows) < 2:
        return []
    header = rows[0]
    data = rows[1:] if rows[1] and rows[1][0].strip() else rows[2:]
    where = {n: header.index(n) for n in names if n in header}
    out = []
    for row in data:
        values = {n: v for n, i in where.items() if i < len(row) and (v := _number(row[i])) is not None}
        out.append(values)
    return out


def short_name(kernel: str) -> str:
    """A kernel's function name without its return type, namespaces, template arguments and parameters."""
    text, depth = [], 0
    for ch in kernel.strip():  # template arguments removed whole, nested ones and `<unnamed>` namespaces included
        if ch == "<":
            depth += 1
        elif ch == ">" and depth:
            depth -= 1
        elif not depth:
            text.append(ch)
    head = "".join(text).split("(", 1)[0].strip()
    name = head.split()[-1].split("::")[-1] if head else ""
    return name or kernel.strip()


def summarize(kernels: list[KernelCounters], top: int = 3) -> dict[str, Any]:
    """The counters of one call: every figure weighted by each kernel's GPU time (a kernel of 1% of the call says
    little about it), the time shares per kernel name, the top stall reasons with their shares of all stall
    cycles, and the occupancy limiter of the longest kernel."""
    if not kernels:
        return {}
    weights = [k.duration_s if k.duration_s else 0.0 for k in kernels]
    total = sum(weights)
    if total <= 0:
        weights, total = [1.0] * len(kernels), float(len(kernels))

    def mean(attr: str) -> float | None:
        pairs = [(getattr(k, attr), w) for k, w in zip(kernels, weights, strict=True) if getattr(k, attr) is not None]
        wsum = sum(w for _, w in pairs)
        return round(sum(v * w for v, w in pairs) / wsum, 2) if pairs and wsum > 0 else None

    shares: dict[str, float] = {}
    for k, w in zip(kernels, weights, strict=True):
        shares[short_name(k.name)] = shares.get(short_name(k.name), 0.0) + w / total
    stalls: dict[str, float] = {}
    for k, w in zip(kernels, weights, strict=True):
        for reason, v in k.stalls.items():
            stalls[reason] = stalls.get(reason, 0.0) + v * w
    stall_total = sum(stalls.values())
    top_stalls = sorted(stalls.items(), key=lambda kv: -kv[1])[:top]
    longest = max(zip(kernels, weights, strict=True), key=lambda kw: kw[1])[0]
    return {
        "launches": len(kernels),
        "gpu_time_s": sum(k.duration_s or 0.0 for k in kernels) or None,
        "dram_pct": mean("dram_pct"), "l2_pct": mean("l2_pct"), "sm_pct": mean("sm_pct"),
        "tensor_pct": mean("tensor_pct"), "occupancy_pct": mean("occupancy_pct"),
        "theoretical_occupancy_pct": mean("theoretical_occupancy_pct"), "l2_hit_pct": mean("l2_hit_pct"),
        "occupancy_limiter": longest.occupancy_limiter,
        "stalls": [{"reason": r, "share": round(v / stall_total, 3)} for r, v in top_stalls] if stall_total else [],
        "kernel_shares": [{"kernel": n, "share": round(s, 3)}
                          for n, s in sorted(shares.items(), key=lambda kv: -kv[1])],
    }
