"""What a profiler sees of a candidate, after (and apart from) its timed verdict.

On MLX-CUDA, Nsight Compute (`ncu`, where installed) runs the candidate's worker as its child, inside the same
sandbox as an evaluation's candidate worker (sandbox.py's profiler mode: the profiler's installation readable, a
loopback of the worker's own network namespace on which only the profiler's ports work). The worker warms the
candidate up on one search workload, then makes a few calls between cuProfilerStart and cuProfilerStop
(worker.py: Worker.profile); ncu records only those (`--profile-from-start off`) at the GPU's own clocks
(`--clock-control none`), with the targeted metric list of ncu.py. The profiled process is a new one, started after
the verdict: the verdict never depends on it. Always, where nvcc is installed, the compiler's resource report of
the candidate's kernels (knowledge/resources.py: registers, spills, shared memory).

The counters are advice to the proposer, never part of a verdict: the candidate runs beside ncu in one sandbox and
could disturb what it reports, which can cost it only a worse proposal, never a better score.

Where counters cannot exist (mlx-metal, the CPU) or cannot be had (no ncu, no permission to read the counters), the
report says so in one line and keeps what there is: the verdict's roofline fraction and the resource report.
"""

from __future__ import annotations

import contextlib
import os
import stat
import time
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from ksearch.errors import WorkerDied
from ksearch.harness import ncu
from ksearch.harness.process import WorkerProcess, start

if TYPE_CHECKING:
    from ksearch.backends import Backend
    from ksearch.harness.result import EvalResult
    from ksearch.tasks.base import Task

#: Calls before the profiled ones (compiles, caches) and profiled calls.
WARMUP_CALLS, PROFILED_CALLS = 2, 2
#: The most ncu's output may be (a log of a few hundred launches is far less).
_MAX_LOG_BYTES = 16 << 20
_LOG_NAME = "ncu-counters.csv"


@dataclass
class ProfileReport:
    """One profiled candidate. `status`: "counters" (ncu's counters are in `summary` and `kernels`), "no_counters"
    (ncu missing, refused or failed: `note` says which), "roofline_only" (a backend without hardware counters)."""

    status: str
    backend: str
    workload: str
    note: str = ""
    summary: dict[str, Any] = field(default_factory=dict)
    kernels: list[dict[str, Any]] = field(default_factory=list)
    calls: int = 0
    resources: list[dict[str, Any]] = field(default_factory=list)
    resources_note: str | None = None
    roofline_fraction: float | None = None
    duration_s: float = 0.0  # what profiling cost in wall time
    containment: dict[str, str] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ProfileReport:
        known = set(cls.__dataclass_fields__)
        return cls(**{k: v for k, v in data.items() if k in known})

    @property
    def has_counters(self) -> bool:
        return self.status == "counters" and bool(self.summary)

    def digest(self) -> dict[str, Any]:
        """What the world model's rules read (worldmodel/counters.py): the counters' summary, the compiler's worst
        spill and register count, the roofline fraction; empty when there is nothing measured."""
        out: dict[str, Any] = dict(self.summary) if self.has_counters else {}
        if self.resources:
            out["spill_bytes"] = max(int(r.get("spill_store_bytes") or 0) for r in self.resources)
            out["max_registers"] = max(int(r.get("registers") or 0) for r in self.resources)
        if self.roofline_fraction is not None:
            out["roofline_fraction"] = round(float(self.roofline_fraction), 4)
        return out

    def line(self) -> str:
        """The counters in one line, for the feedback a proposer reads and the report."""
        return summary_line(self.to_json())


def _pct(v: Any) -> str:
    return "-" if not isinstance(v, int | float) else f"{v:.0f}%"


def feedback_line(report: dict[str, Any]) -> str:
    """What a proposer's feedback carries of a profile: its summary line where something was measured (ncu's
    counters, or the compiler's resources), else nothing; the feedback table already holds the roofline fraction, so
    a backend without counters leaves the prompts as they were."""
    if report.get("status") == "counters" or report.get("resources"):
        return summary_line(report)
    return ""


def summary_line(report: dict[str, Any]) -> str:
    """One line for a stored profile report (ProfileReport.to_json): counters where ncu gave them, else why not;
    the compiler's resources; the roofline fraction."""
    parts: list[str] = []
    s = report.get("summary") or {}
    if report.get("status") == "counters" and s:
        parts.append(f"DRAM {_pct(s.get('dram_pct'))} of peak, L2 {_pct(s.get('l2_pct'))}, SM {_pct(s.get('sm_pct'))}, "
                     f"tensor pipe {_pct(s.get('tensor_pct'))}")
        occ = f"occupancy {_pct(s.get('occupancy_pct'))} (theoretical {_pct(s.get('theoretical_occupancy_pct'))}"
        parts.append(occ + (f", limited by {s['occupancy_limiter']})" if s.get("occupancy_limiter") else ")"))
        parts.append(f"L2 hit {_pct(s.get('l2_hit_pct'))}")
        if s.get("stalls"):
            parts.append("stalls: " + ", ".join(f"{x['reason']} {x['share']:.0%}" for x in s["stalls"]))
        shares = s.get("kernel_shares") or []
        if shares:
            parts.append(f"{s.get('launches_per_call', len(shares))} launches per call: "
                         + ", ".join(f"{x['kernel']} {x['share']:.0%}" for x in shares[:3]))
    elif report.get("note"):
        parts.append(str(report["note"]).split(":")[0])
    res = report.get("resources") or []
    if res:
        parts.append("; ".join(f"{r['kernel']}: {r.get('registers')} registers, "
                               + (f"{r['spill_store_bytes']} bytes spilled" if r.get("spill_store_bytes") else "no spills")
                               + (f", {r['static_smem_bytes']} bytes smem" if r.get("static_smem_bytes") else "")
                               for r in res[:3]))
    if isinstance(report.get("roofline_fraction"), int | float):
        parts.append(f"roofline fraction {report['roofline_fraction']:.2f} at {report.get('workload')}")
    return "; ".join(parts)


def profile_candidate(task: Task, backend: Backend, source: str, result: EvalResult | None = None,
                      workload: str | None = None, memory_limit_bytes: int = 16 << 30,
                      timeout_s: float = 600.0) -> ProfileReport:
    """Profile one candidate at one search workload (the first of the backend's tier unless named); `result`, its
    verdict, gives the roofline fraction there. Never raises for the profiler's own failures: they are the note."""
    t0 = time.monotonic()
    w = task.workload(workload) if workload else task.select_workloads(backend.tier)[0]
    roofline = None
    if result is not None:
        roofline = next((r.roofline_fraction for r in result.workloads if r.name == w.name), None)
    report = ProfileReport(status="roofline_only", backend=backend.name, workload=w.name, roofline_fraction=roofline)
    if backend.family != "cuda" or not backend.is_gpu:
        report.note = (f"hardware counters are not available on {backend.name}: the roofline fraction only"
                       + ("" if roofline is not None else " (none measured)"))
        report.duration_s = time.monotonic() - t0
        return report
    from ksearch.knowledge.resources import resource_report

    tensor_dtypes = {t.name: ("T" if t.dtype == "workload" else t.dtype) for t in task.inputs}
    kernels, why = resource_report(source, tensor_dtypes, dtype=w.dtype if w.dtype in ("float16", "bfloat16",
                                                                                          "float32") else "float16")
    report.resources, report.resources_note = [k.to_json() for k in kernels], why
    report.status = "no_counters"
    exe = ncu.ncu_path()
    if exe is None:
        report.note = ("ncu (Nsight Compute) not found (install it or set KSEARCH_NCU): the run goes on without "
                       "counters")
    else:
        deadline = time.monotonic() + timeout_s
        unknown = _run_ncu(exe, task, w.name, source, memory_limit_bytes, deadline, report, ncu.METRICS)
        metrics = ncu.without(ncu.METRICS, unknown)
        if unknown and metrics and time.monotonic() < deadline:
            # Metric names differ between Nsight Compute versions and chips: once more without the unknown ones.
            _run_ncu(exe, task, w.name, source, memory_limit_bytes, deadline, report, metrics)
            left_out = f"this ncu does not know {', '.join(sorted(unknown))}: collected without it"
            report.note = f"{report.note}; {left_out}" if report.note else left_out
    report.duration_s = time.monotonic() - t0
    return report


def _run_ncu(exe: str, task: Task, workload: str, source: str, memory_limit: int, deadline: float,
             report: ProfileReport, metrics: tuple[str, ...]) -> set[str]:
    """One profiled worker under ncu; fills `report`. The metrics ncu said it does not know (none when it ran)."""
    prefix = ncu.command(exe, _LOG_NAME, metrics=metrics)  # relative: ncu runs in the worker's scratch directory
    worker: WorkerProcess | None = None
    output = ""
    try:
        worker, reply = start("candidate", task.origin, "gpu", memory_limit, deadline, source=source,
                              forbidden=task.forbidden, prefix=prefix)
        report.containment = dict(worker.containment)
        if not reply.get("ok"):
            raise WorkerDied(f"the candidate did not load under ncu: {str(reply.get('error', ''))[-300:]}", "crash")
        seed = int.from_bytes(os.urandom(7), "little")
        reply, _ = worker.request({"op": "profile", "workload": workload, "seed": seed, "warmup": WARMUP_CALLS,
                                   "calls": PROFILED_CALLS}, deadline)
        if not reply.get("ok"):
            raise WorkerDied(f"the candidate failed under ncu: {str(reply.get('error', ''))[-300:]}", "crash")
        report.calls = PROFILED_CALLS
        _finish(worker, deadline)
        output = _read_log(worker) + "\n" + worker.output_tail()
    except WorkerDied as died:
        output = "\n".join([_read_log(worker), worker.output_tail() if worker else "", str(died)])
        report.note = ncu.failure_line(output) or f"ncu gave no counters ({_last_line(str(died))}): the run goes on " \
                                                  "without counters"
        return ncu.unknown_metrics(output)
    finally:
        if worker is not None:
            worker.close()
    _keep(output, task.name, workload)
    try:
        launches = ncu.parse_csv(output)
    except ValueError:
        launches = []
    if not launches:
        report.note = ncu.failure_line(output) or ("ncu profiled no kernel of the candidate's calls: the run goes "
                                                   "on without counters")
        return ncu.unknown_metrics(output)
    report.status = "counters"
    report.note = ""
    report.kernels = [k.to_json() for k in launches]
    report.summary = ncu.summarize(launches)
    report.summary["launches_per_call"] = round(len(launches) / max(report.calls, 1), 2)
    return set()


def _keep(output: str, task: str, workload: str) -> None:
    """With KSEARCH_NCU_KEEP=DIR, ncu's raw output is also written to DIR/ncu-<task>-<workload>.csv: a capture to
    check the parser against (tests/data/ncu/)."""
    where = os.environ.get("KSEARCH_NCU_KEEP")
    if where:
        from pathlib import Path

        Path(where).mkdir(parents=True, exist_ok=True)
        (Path(where) / f"ncu-{task}-{workload}.csv").write_text(output)


def _finish(worker: WorkerProcess, deadline: float) -> None:
    """Let the worker exit and ncu write its results (it does when its child has ended), within the deadline."""
    from ksearch.harness import protocol

    with contextlib.suppress(OSError):
        protocol.send(worker.sock, {"op": "exit"})
    # Waited for without reaping it (WorkerProcess.close still kills its process group by that id).
    while not worker._exited():
        if time.monotonic() > deadline:
            raise WorkerDied("ncu did not finish before the profiling deadline", "timeout")
        time.sleep(0.05)


def _read_log(worker: WorkerProcess | None) -> str:
    """ncu's log from the scratch directory, opened without following a link (the candidate could write there)."""
    if worker is None:
        return ""
    try:
        fd = os.open(worker.scratch / _LOG_NAME, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return ""
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return ""
        return os.read(fd, _MAX_LOG_BYTES).decode(errors="replace")
    finally:
        os.close(fd)


def _last_line(text: str) -> str:
    lines = [ln.strip() for ln in text.strip().splitlines() if ln.strip()]
    return (lines[-1] if lines else "no output")[:200]
