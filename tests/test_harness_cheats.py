"""Every harness rule against a deliberately bad candidate (tests/candidates/), on the CPU backend.

Each evaluation spawns a candidate worker and a trusted reference worker, so every case runs on one small workload.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import psutil
import pytest

from ksearch.harness import EvalOptions, EvalResult, evaluate
from ksearch.tasks import get_task

CANDIDATES = Path(__file__).parent / "candidates"
WORKER = "ksearch.harness.worker"


def judge(backend: Any, task_name: str, candidate: str, **options: Any) -> EvalResult:
    task = get_task(task_name)
    options.setdefault("workloads", [task.select_workloads("cpu")[0].name])
    options.setdefault("timeout_s", 90.0)
    return evaluate(task, (CANDIDATES / f"{candidate}.py").read_text(), backend, EvalOptions(**options))


def leftover_workers(marker: str) -> list[str]:
    """Worker processes this test started that are still alive: descendants of this process, and orphans found by the
    marker in their environment (a process that escaped its parent is no longer a descendant)."""
    found = {}
    for p in psutil.Process().children(recursive=True):
        try:
            if WORKER in " ".join(p.cmdline()):
                found[p.pid] = " ".join(p.cmdline())
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    for p in psutil.process_iter(["pid", "cmdline"]):
        try:
            if WORKER in " ".join(p.info["cmdline"] or []) and p.environ().get("KSEARCH_TEST_OWNER") == marker:
                found[p.pid] = " ".join(p.info["cmdline"])
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return [f"{pid}: {cmd}" for pid, cmd in found.items()]


@pytest.fixture(autouse=True)
def no_worker_survives(monkeypatch: pytest.MonkeyPatch):
    """After any evaluation, no worker process of this test remains."""
    marker = f"{os.getpid()}-{id(monkeypatch)}"
    monkeypatch.setenv("KSEARCH_TEST_OWNER", marker)
    yield
    left = leftover_workers(marker)
    for line in left:
        psutil.Process(int(line.split(":")[0])).kill()
    assert not left, f"worker processes survived the evaluation: {left}"


# candidate, task, expected status, a piece of the message, extra options
CASES = [
    ("segfault", "softmax", "runtime_error", "SIGSEGV", {}),
    ("exception", "softmax", "runtime_error", "candidate blew up on purpose", {}),
    ("exit_at_import", "softmax", "runtime_error", "exited with code 0", {}),
    ("nan_output", "softmax", "wrong_answer", "NaN", {}),
    ("wrong_shape", "softmax", "wrong_shape", "shape (1024, 256)", {}),
    ("wrong_dtype", "softmax", "wrong_shape", "dtype float16", {}),
    ("mutate_input", "selective_scan", "wrong_answer", "modified its inputs (u)", {}),
    ("output_cache", "softmax", "wrong_answer", "outside atol", {}),
    ("patched_compare", "softmax", "wrong_answer", "outside atol", {}),
    ("forged_stdout", "softmax", "wrong_answer", "outside atol", {}),
    ("syntax_error", "softmax", "compile_error", "syntax error", {}),
    ("missing_run", "softmax", "compile_error", "run(", {}),
    ("lower_precision", "rmsnorm", "wrong_answer", "outside atol=0.0001", {}),
    ("forbidden_direct", "softmax", "forbidden", "mx.softmax", {}),
    ("forbidden_getattr", "softmax", "forbidden", "at run time: mx.softmax", {}),
    ("forbidden_fallback", "softmax", "forbidden", "at run time: mx.softmax", {}),
    ("forbidden_reload", "softmax", "forbidden", "mx.softmax", {}),
    ("forbidden_gc", "softmax", "forbidden", "mx.softmax", {}),
    ("timer_patch_all", "softmax", "runtime_error", "inconsistent timings", {}),
    ("skip_chained", "gqa_decode", "wrong_answer", "a timed call", {}),
    ("memory_hog", "softmax", "runtime_error", "memory limit", {"memory_limit_bytes": 1 << 30}),
    ("infinite_loop", "softmax", "timeout", "time limit", {"timeout_s": 6.0}),
]


@pytest.mark.parametrize(("candidate", "task", "status", "fragment", "options"), CASES, ids=[c[0] for c in CASES])
def test_bad_candidate_gets_its_status(cpu_backend, candidate, task, status, fragment, options):
    result = judge(cpu_backend, task, candidate, **options)
    assert result.status == status, result.message
    assert fragment in result.message
    assert result.score == 0.0


def test_mutated_input_is_the_one_named(cpu_backend):
    # The mutation is caught on the first trial, before any value is compared: the reference never saw the zeros.
    result = judge(cpu_backend, "selective_scan", "mutate_input")
    assert result.status == "wrong_answer"
    assert "(u)" in result.message and "delta" not in result.message.split("modified its inputs")[1]


def test_forged_stdout_is_only_shown_never_believed(cpu_backend):
    result = judge(cpu_backend, "softmax", "forged_stdout")
    assert result.status == "wrong_answer"
    assert result.score == 0.0
    assert '"status": "passed"' in result.message  # captured and shown, as the candidate's own output
