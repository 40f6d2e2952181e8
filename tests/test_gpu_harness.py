"""The harness on the GPU (marker `gpu`): every task's library kernel (or starter) and baseline, as the harness times
them, agree within 10% with a plain side-by-side loop in one process on the same shapes and layouts.

    KSEARCH_BENCH_OUT=benchmarks/results pytest -m gpu tests/test_gpu_harness.py   # keeps fidelity-TASK-*.json there
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from ksearch.tasks import builtin_names

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def cuda_backend():
    from ksearch.backends import BackendUnavailable, get_backend

    try:
        return get_backend("mlx-cuda")
    except BackendUnavailable as exc:
        pytest.skip(f"mlx-cuda is not available here: {exc}")


@pytest.mark.parametrize("task_name", builtin_names())
def test_harness_timings_agree_with_a_plain_loop(cuda_backend, task_name, tmp_path):
    from ksearch.bench.fidelity import TOLERANCE, run_fidelity

    out = Path(os.environ.get("KSEARCH_BENCH_OUT") or tmp_path)
    # KSEARCH_FIDELITY_PROCESSES=N: the fresh-process protocol (`ksearch bench fidelity --processes N`)
    path = run_fidelity("mlx-cuda", [task_name], out, stem=f"fidelity-{task_name}",
                        on_row=lambda r: print(json.dumps(r), flush=True),
                        processes=int(os.environ.get("KSEARCH_FIDELITY_PROCESSES") or 0))
    data = json.loads(path.read_text())
    assert data["figures"], "no workloads measured"
    failed = [f"{f['workload']}: {f['status']} {f['message']}" for f in data["figures"] if f["status"] != "passed"]
    assert not failed, failed
    # Each miss says, too, whether the harness's figures are ones the plain loop itself gave (its own range widened by
    # the tolerance): at calls whose plain loop disagrees with itself that tells noise from a harness fault.
    off = [f"{f['workload']}: candidate ({f['candidate']}) {f['candidate_ratio']:.3f}, baseline "
           f"({f['baseline']}) {f['baseline_ratio']:.3f}; plain loop's own spread {f['plain_drift'] or 0:.2f}x, "
           f"within it: {f['candidate_within_plain_spread']} / {f['baseline_within_plain_spread']}"
           for f in data["figures"]
           if abs(f["candidate_ratio"] - 1) > TOLERANCE or abs(f["baseline_ratio"] - 1) > TOLERANCE]
    assert not off, off
