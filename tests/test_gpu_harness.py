"""The harness on the GPU (marker `gpu`): every task's library kernel (or starter) and baseline, as the harness times
them, agree within 10% with a plain side-by-side loop in one process on the same shapes and layouts.

    pytest -m gpu tests/test_gpu_harness.py            # KSEARCH_BENCH_OUT=DIR keeps the JSON there
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def cuda_backend():
    from ksearch.backends import BackendUnavailable, get_backend

    try:
        return get_backend("mlx-cuda")
    except BackendUnavailable as exc:
        pytest.skip(f"mlx-cuda is not available here: {exc}")


def test_harness_timings_agree_with_a_plain_loop(cuda_backend, tmp_path):
    from ksearch.bench.fidelity import TOLERANCE, run_fidelity

    out = Path(os.environ.get("KSEARCH_BENCH_OUT") or tmp_path)
    path = run_fidelity("mlx-cuda", None, out, on_row=lambda r: print(json.dumps(r), flush=True))
    data = json.loads(path.read_text())
    failed = [f"{f['task']}/{f['workload']}: {f['status']} {f['message']}" for f in data["figures"]
              if f["status"] != "passed"]
    assert not failed, failed
    off = [f"{f['task']}/{f['workload']}: candidate {f['candidate_ratio']:.3f}, baseline {f['baseline_ratio']:.3f}"
           for f in data["figures"]
           if abs(f["candidate_ratio"] - 1) > TOLERANCE or abs(f["baseline_ratio"] - 1) > TOLERANCE]
    assert not off, off
