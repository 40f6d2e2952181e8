"""Our Metal code through `ksearch eval --backend mlx-metal-emu` and `ksearch run`: every task's Metal starter, two
renderings of every Metal template family, a CUDA kernel carried over by `ksearch port` and written as Metal, and a
short offline search, all judged by the real harness on the CPU engine at the cpu-tier shapes.

CI runs one of each kind (each a few tens of seconds on 2 cores); KSEARCH_EMU_FULL=1 runs every starter and rendering.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from ksearch.backends.detect import clang_path
from ksearch.policy.templates import all_families, render
from ksearch.tasks import all_tasks, get_task

EMU = "mlx-metal-emu"
HERE = Path(__file__).parent
FULL = os.environ.get("KSEARCH_EMU_FULL", "") not in ("", "0")

pytestmark = pytest.mark.skipif(clang_path() is None, reason="clang++ not installed: the Metal emulation needs it")
full_only = [pytest.mark.slow, pytest.mark.skipif(not FULL, reason="KSEARCH_EMU_FULL=1 runs the full set")]


def ksearch(*args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "ksearch.cli", *args], capture_output=True, text=True,
                          timeout=timeout, stdin=subprocess.DEVNULL)


def eval_json(task: str, source: str, tmp_path: Path, name: str, *extra: str) -> dict[str, Any]:
    f = tmp_path / f"{name}.py"
    f.write_text(source)
    done = ksearch("eval", task, str(f), "--backend", EMU, "--json", *extra)
    assert done.returncode in (0, 1), done.stderr[-3000:]
    result: dict[str, Any] = json.loads(done.stdout)
    assert done.returncode == (0 if result["status"] == "passed" else 1)  # 1: the candidate did not pass
    assert result["backend"] == EMU
    assert "not a Metal speed" in result["timing"], "an emulated verdict must say its times are the emulator's"
    return result


def _passed(result: dict[str, Any]) -> None:
    assert result["status"] == "passed", f"{result['status']}: {result['message'][-3000:]}"
    assert all(w["latency_s"] and w["roofline_fraction"] is None for w in result["workloads"])


# -- every task's Metal starter ------------------------------------------------------------------------------------
STARTERS = sorted(t.name for t in all_tasks() if t.baseline("naive").sources.get("metal"))
CI_STARTER = "softmax"


def test_every_task_has_a_metal_starter() -> None:
    assert set(STARTERS) == {t.name for t in all_tasks()}


@pytest.mark.parametrize("task", [pytest.param(t, marks=[] if t == CI_STARTER else full_only) for t in STARTERS])
def test_metal_starter_passes_eval(task: str, tmp_path: Path) -> None:
    _passed(eval_json(task, get_task(task).starting_source("metal"), tmp_path, f"{task}_metal"))


# -- two renderings of every Metal template family -------------------------------------------------------------------
#: Per family, a second parameter set far from its default (the first rendering is the default).
SECOND = {
    "softmax.metal.rowreduce": {"layout": "multi_row_per_block", "threads": 128, "online": True, "exp2": True},
    "rmsnorm.metal.rowreduce": {"layout": "multi_row_per_block", "threads": 64},
    "selective_scan.metal.chunked": {"channels": 16, "chunks": 16, "exp2": False},
    "attention.metal.flash_simdgroup": {"bk128": 8, "bk64": 16, "constants": True, "float32": "rows"},
    "attention.metal.row_tiled": {"threads": 32, "bn": 8},
    "gqa_decode.metal.split_k": {"target_blocks": 1, "warps": 8, "min_chunk": 512, "unroll": 4, "constants": True},
}
METAL_FAMILIES = sorted(f.id for f in all_families() if "mlx-metal" in f.backends)
CI_RENDERING = ("softmax.metal.rowreduce", "default")  # two block reductions: the race it had is caught


def test_every_metal_family_has_a_second_rendering() -> None:
    assert set(SECOND) == set(METAL_FAMILIES)
    for fam in all_families():
        if fam.id in SECOND:
            params = {**fam.default(), **SECOND[fam.id]}
            assert params != fam.default() and fam.valid(params), fam.id


@pytest.mark.parametrize("family,which", [
    pytest.param(f, w, marks=[] if (f, w) == CI_RENDERING else full_only)
    for f in sorted(SECOND) for w in ("default", "second")])
def test_metal_template_rendering_passes_eval(family: str, which: str, tmp_path: Path) -> None:
    fam = next(f for f in all_families() if f.id == family)
    source = render(family, SECOND[family] if which == "second" else None)
    # Against the task's Metal starter where it has one: emulator time against emulator time, the baseline's worker
    # running Metal through the emulation as the candidate's does.
    result = eval_json(fam.tasks[0], source, tmp_path, f"{family.replace('.', '_')}_{which}", "--baseline", "naive")
    _passed(result)
    assert result["baseline"] == "naive" and all(w["baseline_latency_s"] for w in result["workloads"])


# -- a CUDA kernel carried over by `ksearch port`, written as Metal ----------------------------------------------------
def test_ported_cuda_kernel_runs_as_metal(tmp_path: Path) -> None:
    """tests/data/cuda/reduction.cu (shared-memory tree, warp shuffles, an atomic add into a zeroed output) carried
    over construct by construct as `ksearch port` maps it, then judged by the harness on its micro-task."""
    done = ksearch("port", str(HERE / "data" / "cuda" / "reduction.cu"), "--backend", EMU, "--json")
    assert done.returncode == 0, done.stderr
    port = json.loads(done.stdout)
    metal = (HERE / "data" / "metal" / "row_sum_ported.py").read_text()
    # Each construct the port names is used in the Metal version, in the form the port gives for it.
    forms = {"shared_memory": "threadgroup float", "block_index": "threadgroup_position_in_grid",
             "thread_index": "thread_position_in_threadgroup", "syncthreads": "threadgroup_barrier(mem_flags::mem_threadgroup)",
             "warp_shuffle_down_up": "simd_shuffle_down", "atomic_add": "atomic_fetch_add_explicit",
             "init_value": "init_value=0"}
    targets = {f["concept"]: f["target"] for f in port["findings"]}
    for concept, form in forms.items():
        assert concept in targets, (concept, sorted(targets))
        assert form in targets[concept] and form in metal, (concept, form, targets[concept])
    assert "atomic_outputs=True" in targets["atomic_add"] and "atomic_outputs=True" in metal
    sys.path.insert(0, str(HERE / "data" / "cuda"))
    try:
        from micro_tasks import make  # type: ignore[import-not-found]
    finally:
        sys.path.pop(0)
    task_file = tmp_path / "micro_rowsum.py"
    task_file.write_text((HERE / "data" / "cuda" / "micro_tasks.py").read_text() + '\n\nTASK = make("rowsum")\n')
    assert make("rowsum").select_workloads("cpu")
    result = eval_json(str(task_file), metal, tmp_path, "row_sum_ported")
    _passed(result)


# -- a short offline search ------------------------------------------------------------------------------------------
def test_offline_search_runs_to_the_end(tmp_path: Path) -> None:
    # The starting kernel and one proposal are enough for what is checked (the run, its report and its exports say
    # the times are the emulator's); each emulated evaluation costs some 10 s on 2 cores.
    budget = os.environ.get("KSEARCH_EMU_RUN_BUDGET", "2")
    done = ksearch("run", "softmax", "--backend", EMU, "--budget", budget, "--runs-dir", str(tmp_path), "--quiet",
                   timeout=1800)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    assert "not a Metal speed" in done.stdout
    run = next(tmp_path.iterdir())
    report = ksearch("report", str(run))
    assert report.returncode == 0, report.stderr
    assert "finished" in report.stdout and "not a Metal speed" in report.stdout
    assert EMU in report.stdout
    # What leaves the run says it too: the exported module's header; a FlashInfer trace claims no performance.
    module = tmp_path / "best_kernel.py"
    assert ksearch("export", str(run), "--out", str(module)).returncode == 0
    assert "not a Metal speed" in module.read_text()
    trace = tmp_path / "trace"
    assert ksearch("export", str(run), "--format", "flashinfer-trace", "--out", str(trace)).returncode == 0
    rows = [json.loads(line) for f in (trace / "traces").rglob("*.jsonl") for line in f.read_text().splitlines()]
    assert rows and all(r["evaluation"]["performance"] is None for r in rows)
    assert all(r["evaluation"]["status"] == "PASSED" for r in rows if r["evaluation"])


# -- the engine's errors are the harness's verdicts -----------------------------------------------------------------
_FAULTY = '''import mlx.core as mx

_SRC = """
    uint row = thread_position_in_grid.x;
    int rows = x_shape[0], cols = x_shape[1];
    threadgroup float pad[PAD];
    pad[thread_position_in_threadgroup.x % PAD] = 0.0f;
    if ((int)row >= rows) return;
    float m = -INFINITY;
    for (int c = 0; c < cols; ++c) m = metal::max(m, (float)x[row * cols + c]);
    float s = 0.0f;
    for (int c = 0; c < cols; ++c) s += metal::exp((float)x[row * cols + c] - m);
    FAULT
    for (int c = 0; c < cols; ++c) out[row * cols + c] = (T)(metal::exp((float)x[row * cols + c] - m) / s);
"""

_k = mx.fast.metal_kernel(name="softmax_faulty", input_names=["x"], output_names=["out"], source=_SRC)


def run(x):
    return _k(inputs=[x], template=[("T", x.dtype), ("PAD", PAD)], grid=(x.shape[0], 1, 1), threadgroup=(64, 1, 1),
              output_shapes=[x.shape], output_dtypes=[x.dtype])[0]
'''


# FAULT is line 11 of _SRC and line 13 of the candidate's file.
AT_FAULT = "metal_kernel 'softmax_faulty' at line 13 of candidate.py (line 11 of its source=): "


@pytest.mark.parametrize("pad,fault,status,words", [
    (64, "if ((int)row == rows - 1) out[rows * cols] = (T)0;", "runtime_error",
     (AT_FAULT + "buffer 2 (`out`): out-of-bounds", "thread (")),
    (64, "s = undeclared_function(s);", "compile_error", (AT_FAULT + "use of undeclared identifier",)),
    (64, "if (row > 0) return;", "wrong_answer",
     ("values are NaN or Inf, the first at (1, 0)", "a NaN there may be an element the kernel never wrote")),
    pytest.param(12288, "", "compile_error", ("softmax_faulty", "49152 bytes", "32768"), marks=full_only),
], ids=["a write past the output", "an undeclared function", "rows never written", "48 KB of threadgroup memory"])
def test_faults_are_verdicts_naming_kernel_and_line(pad: int, fault: str, status: str, words: tuple[str, ...],
                                                    tmp_path: Path) -> None:
    result = eval_json("softmax", _FAULTY.replace("PAD)]", f"{pad})]").replace("FAULT", fault), tmp_path,
                       f"faulty_{pad}_{len(fault)}")
    assert result["status"] == status, result["message"][-2000:]
    assert "Traceback" not in result["message"], result["message"]
    for w in words:
        assert w in result["message"], (w, result["message"][-2000:])
