"""Every Metal exemplar of the knowledge base runs: each, as the full candidate of its micro-task
(tests/data/cuda/exemplar_candidates.py), on the Metal emulation's CPU engine, with its outputs judged against the
task's reference by the harness's own judge. In this process (no workers): the exemplars are trusted text of ours,
and the harness path is covered by test_metalemu_acceptance_eval.py.

CI runs the micro-task's cpu-tier workload (float32) and the workloads a launch is restricted to;
KSEARCH_EMU_FULL=1 adds every gpu-tier workload the launch admits (float16 too, head dim 128), where the emulation
found the threadgroup-memory overflow of gqa_head_grouping at head dim 128.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import mlx.core as mx
import numpy as np
import pytest

from ksearch.backends.detect import clang_path
from ksearch.harness.digest import from_raw_bits, raw_bits
from ksearch.harness.judge import judge
from ksearch.knowledge import load_patterns
from ksearch.metalemu import surface
from ksearch.tasks.inputs import make_inputs

FULL = os.environ.get("KSEARCH_EMU_FULL", "") not in ("", "0")

DATA = Path(__file__).parent / "data" / "cuda"
sys.path.insert(0, str(DATA))

from exemplar_candidates import LAUNCHES, candidate  # noqa: E402
from micro_tasks import make  # noqa: E402
from script_module import load_module  # noqa: E402

pytestmark = pytest.mark.skipif(clang_path() is None, reason="clang++ not installed: the Metal emulation needs it")

METAL_PATTERNS = sorted(p["id"] for p in load_patterns() if p.get("exemplars", {}).get("metal"))


@pytest.fixture(scope="module", autouse=True)
def emulated() -> Iterator[None]:
    mx.set_default_device(mx.cpu)
    restore = surface.install("cpu")
    try:
        yield
    finally:
        restore()


def _module(source: str, tag: str, tmp_path: Path) -> Any:
    path = tmp_path / f"exemplar_{tag}.py"
    path.write_text(source)
    return load_module(path, f"ksearch_exemplar_{tag}")


def test_every_metal_exemplar_has_a_launch() -> None:
    assert METAL_PATTERNS and set(METAL_PATTERNS) <= set(LAUNCHES)


@pytest.mark.parametrize("pattern", METAL_PATTERNS)
def test_metal_exemplar_runs_and_is_right(pattern: str, tmp_path: Path) -> None:
    launch = LAUNCHES[pattern]
    task = make(launch.task)
    body = next(p for p in load_patterns() if p["id"] == pattern)["exemplars"]["metal"]
    run = _module(candidate(pattern, body, "metal"), pattern, tmp_path).run
    allowed = [w for w in task.workloads if launch.workloads is None or w.name in launch.workloads]
    workloads = [w for w in task.workloads if (w.tier == "cpu" and launch.workloads is None) or
                 (launch.workloads is not None and w.name in launch.workloads) or (FULL and w in allowed)]
    assert workloads
    for w in workloads:
        for seed in (1, 2):
            inputs = make_inputs(task, w, seed)
            outs = run(**inputs, **dict(w.params))
            outs = tuple(outs) if isinstance(outs, (tuple, list)) else (outs,)
            ref = task.reference({k: v.astype(mx.float32) for k, v in inputs.items()}, **dict(w.params))
            ref = ref if isinstance(ref, tuple) else (ref,)
            dtypes = [str(o.dtype).rsplit(".", 1)[-1] for o in outs]
            got = [from_raw_bits(raw_bits(o), d) for o, d in zip(outs, dtypes, strict=True)]
            verdict = judge(task, w, got, dtypes, [np.array(r.astype(mx.float32)) for r in ref])
            assert verdict.status == "passed", f"{pattern} on {w.name} (seed {seed}): {verdict.message}"
