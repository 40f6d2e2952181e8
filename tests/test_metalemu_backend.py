"""The mlx-metal-emu backend's plumbing, without running a kernel: where it is offered, what it is called, which code
it takes, what its workers put in place, and that every figure it produces says whose time it is."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import mlx.core as mx
import pytest

from ksearch.backends import detect, emulation_note, get_backend
from ksearch.backends.detect import BackendUnavailable
from ksearch.bench.results import make_result
from ksearch.harness.measure import classify_exception
from ksearch.harness.result import EvalResult, WorkloadResult
from ksearch.kernels import device
from ksearch.metalemu import surface
from ksearch.policy.templates import families_for
from ksearch.report.tables import eval_table

EMU = "mlx-metal-emu"


def ksearch(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "ksearch.cli", *args], capture_output=True, text=True,
                          timeout=timeout, stdin=subprocess.DEVNULL)


needs_clang = pytest.mark.skipif(detect.clang_path() is None, reason="clang++ not installed (apt-get install clang)")


@needs_clang
def test_offered_where_clang_is_never_the_default() -> None:
    b = get_backend(EMU)
    assert (b.family, b.dialect, b.emulation, b.code_backend) == ("metal", "metal", "cpu", "mlx-metal")
    # Runs on the CPU: cpu-tier workloads, CPU timeouts and timing plans, no physical floor.
    assert b.tier == "cpu" and not b.is_gpu
    prof = b.profile()
    assert prof["shared_memory_kb"]["default"] == 32 and prof["max_threads_per_group"] == 1024
    assert prof["bandwidth_gbs"] is None and prof["peak_tflops"] == {} and prof["llc_bytes"] > 0
    assert surface.limits() == (1024, 32 << 10)
    assert not detect.best_backend().emulated
    assert get_backend(None).name != EMU


def test_without_clang_it_is_refused_in_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", "/nonexistent")
    monkeypatch.delenv("KSEARCH_CLANG", raising=False)
    detect._probe.cache_clear()
    try:
        assert EMU not in [b.name for b in detect.available_backends()]
        with pytest.raises(BackendUnavailable, match="needs clang"):
            get_backend(EMU)
    finally:
        detect._probe.cache_clear()


@needs_clang
def test_backends_command_says_what_it_is() -> None:
    done = ksearch("backends", "--json")
    assert done.returncode == 0, done.stderr
    rows = json.loads(done.stdout)
    assert rows[-1]["backend"] == EMU
    env = rows[-1]["environment"]
    assert env["emulation"] == "cpu" and "not a Metal speed" in env["timing"] and env["compiler"]
    table = ksearch("backends")
    assert EMU in table.stdout and "emulator" in table.stdout


def test_its_code_is_metal_code() -> None:
    from ksearch.knowledge.lint import lint_source
    from ksearch.knowledge.spec import render_spec
    from ksearch.tasks import get_task

    for task in ("softmax", "attention", "gqa_decode", "selective_scan"):
        assert [f.id for f in families_for(task, EMU)] == [f.id for f in families_for(task, "mlx-metal")]
        assert families_for(task, EMU)
    task = get_task("softmax")
    starter = task.starting_source("metal")
    assert lint_source(starter, EMU, task) == lint_source(starter, "mlx-metal", task)
    cuda = [d.code for d in lint_source(task.starting_source("cuda"), EMU, task)]
    assert "wrong-dialect" in cuda
    spec = render_spec(task, EMU)
    assert spec.startswith(f"# Kernel spec: softmax on {EMU}") and "not the device's" in spec
    assert "cpu tier" in spec and "threadgroup_barrier" in spec


@needs_clang
@pytest.mark.parametrize("args", [("spec", "softmax"), ("lint", "--task", "softmax", "--deep"), ("port",)])
def test_knowledge_commands_take_it(args: tuple[str, ...], tmp_path: Path) -> None:
    from ksearch.tasks import get_task

    extra: list[str] = []
    if args[0] == "lint":
        f = tmp_path / "c.py"
        f.write_text(get_task("softmax").starting_source("metal"))
        extra = [str(f)]
    if args[0] == "port":
        f = tmp_path / "k.cu"
        f.write_text("__global__ void k(float* x) { __shared__ float s[32]; s[threadIdx.x] = x[threadIdx.x];"
                     " __syncthreads(); x[threadIdx.x] = s[31 - threadIdx.x]; }\n")
        extra = [str(f)]
    done = ksearch(*args, *extra, "--backend", EMU)
    assert done.returncode == 0, done.stdout + done.stderr


def test_kernel_dispatch_sees_the_emulation() -> None:
    """Library modules run unchanged: with the emulation in place their dispatch takes the Metal kernels."""
    from ksearch.kernels.selective_scan import kernel_backend

    assert device.backend() == "cpu" and kernel_backend() == "ops"
    restore = surface.install("cpu")
    try:
        assert device.metal_emulated() and device.backend() == "metal"
        assert kernel_backend(use_metal=True) == "metal" and kernel_backend() == "ops"  # Metal kernels stay opt-in
    finally:
        restore()
    assert not device.metal_emulated() and mx.fast.metal_kernel.__module__ != surface.__name__


def test_engine_status_is_the_verdict() -> None:
    tb = "Traceback ...\nksearch.errors.SomeEmulationError: kernel custom_kernel_x line 3: read past the buffer"
    assert classify_exception(tb, [], "runtime_error") == "runtime_error"
    assert classify_exception(tb, [], "compile_error") == "compile_error"
    assert classify_exception(tb, [], "passed") == "runtime_error"  # only the two failure kinds pass through
    assert classify_exception(tb, ["mx.softmax"], "compile_error") == "forbidden"


def test_an_engine_error_reaches_the_verdict_as_its_message_alone() -> None:
    # It names the kernel and the candidate's line; a traceback added the harness's and the emulation's frames, and
    # its length pushed the error itself out of the verdict's message.
    from ksearch.errors import MetalEmuError
    from ksearch.harness.worker import _failure

    def failing(exc: BaseException) -> dict[str, Any]:
        try:
            raise exc
        except BaseException as caught:  # noqa: BLE001 - what the worker catches
            return _failure(caught)

    said = "metal_kernel 'k' at line 8 of candidate.py (line 6 of its source=): expected ';'"
    reply = failing(MetalEmuError(said, status="compile_error"))
    assert reply == {"ok": False, "kind": "exception", "error": f"MetalEmuError: {said}", "status": "compile_error"}
    other = failing(ValueError("[metal_kernel] Expected `inputs` to have size 1 but got size 2."))
    assert "Traceback" in other["error"] and "status" not in other  # the candidate's own Python: where it raised


def test_every_figure_says_it_is_the_emulator_s(tmp_path: Path) -> None:
    note = emulation_note(EMU)
    assert note and "not a Metal speed" in note and emulation_note("mlx-cpu") is None
    r = EvalResult(status="passed", task="softmax", backend=EMU, baseline="native", score=0.5, timing=note,
                   workloads=[WorkloadResult("w", latency_s=1e-3, baseline_latency_s=5e-4, speedup=0.5)])
    from rich.console import Console

    console = Console(record=True, width=200)
    console.print(eval_table(r))
    text = console.export_text()
    assert "(emulator times, not the device's)" in text and "not a Metal speed" in text
    assert EvalResult.from_json(r.to_json()).timing == note
    if detect.clang_path() is not None:
        data = make_result("naive", get_backend(EMU), [], [], [])
        assert data["timing"] == note and data["notes"].startswith(note)
    cpu = make_result("naive", get_backend("mlx-cpu"), [], [], [])
    assert "timing" not in cpu


def test_the_cuda_engine_is_chosen_by_name_and_refused_without_cuda(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KSEARCH_EMU_ENGINE", "cuda")
    detect._probe.cache_clear()
    try:
        if detect._probe()["cuda"]:
            backend = get_backend("mlx-metal-emu")
            assert backend.emulation == "cuda" and backend.is_gpu  # the GPU tier, on the GPU
        else:
            with pytest.raises(BackendUnavailable, match="KSEARCH_EMU_ENGINE=cuda needs MLX with CUDA"):
                get_backend("mlx-metal-emu")
        monkeypatch.setenv("KSEARCH_EMU_ENGINE", "opencl")
        with pytest.raises(BackendUnavailable, match="KSEARCH_EMU_ENGINE='opencl' is not an engine"):
            get_backend("mlx-metal-emu")
    finally:
        detect._probe.cache_clear()


def test_installing_the_cuda_engine_routes_metal_kernel_through_it(monkeypatch: pytest.MonkeyPatch) -> None:
    from ksearch.metalemu import cuda_kernel

    seen: list[tuple[str, tuple[str, ...]]] = []

    def via_cuda(name, input_names, output_names, source, *rest):  # type: ignore[no-untyped-def]
        seen.append((name, tuple(input_names)))
        return "translated"

    monkeypatch.setattr(cuda_kernel, "metal_kernel_via_cuda", via_cuda)
    restore = surface.install("cuda")
    try:
        assert mx.fast.metal_kernel.metal_emulation == "cuda"  # type: ignore[attr-defined]
        made = mx.fast.metal_kernel(name="k", input_names=["a"], output_names=["o"], source="o[0] = a[0];")
        assert made == "translated" and seen == [("k", ("a",))]
    finally:
        restore()
    with pytest.raises(ValueError, match="unknown Metal emulation engine"):
        surface.install("opencl")


def test_the_cuda_engine_sizes_its_timing_pools_by_the_gpus_cache(monkeypatch: pytest.MonkeyPatch) -> None:
    # The CUDA engine runs on the GPU: its pools must outgrow the GPU's L2, not this CPU's cache; its device is named.
    monkeypatch.setattr(detect, "_device_name", lambda family: "NVIDIA H200" if family == "cuda" else "CPU")
    emu = detect.Backend(EMU, "metal", emulation="cuda")
    h200 = detect.profile_for("cuda", "NVIDIA H200")
    assert h200["matched"] and emu.is_gpu
    assert emu.profile()["llc_bytes"] == h200["llc_bytes"] != detect.Backend(EMU, "metal", emulation="cpu").profile()[
        "llc_bytes"]
    assert emu.profile()["bandwidth_gbs"] is None  # still no floor: the emulation's time is not a Mac's
    assert detect.device_name(emu) == "Apple GPU emulated on NVIDIA H200"
