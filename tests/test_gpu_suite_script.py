"""benchmarks/gpu_suite.sh on a machine without a GPU: what it refuses, in one line, before any set-up."""

import subprocess
import sys
from pathlib import Path

import pytest

SUITE = Path(__file__).resolve().parents[1] / "benchmarks/gpu_suite.sh"


@pytest.mark.parametrize(("args", "message"), [
    ([], "name wgmma configurations"),
    (["ws3_n64_s4_p4_tmas_qn"], "_qn (the next item's Q"),
    (["ws3_n64_s4_p4_nope"], "is not a wgmma configuration"),
])
def test_gpu_suite_prefill_candidates_refuses_bad_names_before_any_setup(args: list[str], message: str) -> None:
    proc = subprocess.run(["bash", str(SUITE), "prefill-candidates", *args], capture_output=True, text=True, timeout=60,
                          env={"PATH": "/usr/bin:/bin", "PY": sys.executable, "OUT": "/nonexistent/out"})
    assert proc.returncode == 2 and message in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1
