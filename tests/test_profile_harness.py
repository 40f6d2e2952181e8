"""Profiling after the verdict: ncu's raw CSV read back, the compiler's resource report, and the profiled process
run for real under fake `ncu` executables (the tool missing, refused the counters, failing to start, and giving a
capture), inside the sandbox's profiler mode. No GPU: MLX runs the candidate on the CPU here."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from ksearch.backends.detect import Backend
from ksearch.harness import ncu, sandbox
from ksearch.harness.profile import profile_candidate, summary_line
from ksearch.knowledge.resources import parse_ptxas
from ksearch.tasks import get_task

DATA = Path(__file__).parent / "data"
FIXTURE = DATA / "ncu" / "layout_gqa_decode_split_k.csv"
#: A real capture: ncu 2025.3.1 on the H200 with METRICS, over a cuBLAS GEMM, a cast and PyTorch's softmax.
H200_CAPTURE = DATA / "ncu" / "h200_torch_gemm_softmax_raw.csv"
#: A real contained capture: `ksearch eval gqa_decode <naive starter> --profile` on the H200 (MLX 0.32.4), the
#: profiled worker inside the sandbox's profiler mode, two profiled calls.
H200_CONTAINED = DATA / "ncu" / "h200_mlx_gqa_decode_naive_contained_raw.csv"
CUDA = Backend("mlx-cuda", "cuda")
#: A CPU-sized softmax that runs on MLX's CPU; the profiled worker does not know it is not on a GPU.
CANDIDATE = "import mlx.core as mx\n\ndef run(x):\n    return mx.exp(x - x.max(axis=-1, keepdims=True)) / " \
            "mx.exp(x - x.max(axis=-1, keepdims=True)).sum(axis=-1, keepdims=True)\n"

PERM = ("==ERROR== ERR_NVGPUCTRPERM - The user does not have permission to access NVIDIA GPU Performance Counters "
        "on the target device 0. For instructions on enabling permissions and to get more information see "
        "https://developer.nvidia.com/ERR_NVGPUCTRPERM")


def _fake_ncu(tmp_path: Path, body: str) -> str:
    """An `ncu` that takes the profiler's arguments up to --log-file, then does `body` (sh)."""
    bindir = tmp_path / "fake-ncu" / "bin"
    bindir.mkdir(parents=True)
    exe = bindir / "ncu"
    exe.write_text("#!/bin/sh\nwhile [ $# -gt 0 ]; do case \"$1\" in --log-file) log=\"$2\"; shift 2; break;; "
                   "*) shift;; esac; done\n" + body)
    exe.chmod(exe.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return str(exe)


def _profile(monkeypatch: pytest.MonkeyPatch, exe: str | None) -> dict:
    """Profile CANDIDATE with `exe` as the `ncu` first on PATH, or with no ncu anywhere (None)."""
    monkeypatch.delenv("KSEARCH_NCU", raising=False)
    monkeypatch.setattr(ncu, "DEFAULT_DIRS", ())
    path = [p for p in os.environ.get("PATH", "").split(os.pathsep) if p and not os.path.isfile(os.path.join(p, "ncu"))]
    monkeypatch.setenv("PATH", os.pathsep.join(([str(Path(exe).parent)] if exe else []) + path))
    assert ncu.ncu_path() == exe
    monkeypatch.setenv("KSEARCH_NVCC", "/nonexistent/nvcc")  # the resource report is tested on its own below
    task = get_task("softmax")
    workload = next(w.name for w in task.workloads if w.tier == "cpu")
    return profile_candidate(task, CUDA, CANDIDATE, workload=workload, memory_limit_bytes=4 << 30,
                             timeout_s=120).to_json()


def test_the_raw_page_csv_is_read_by_name_with_extra_columns_and_na() -> None:
    launches = ncu.parse_csv(FIXTURE.read_text())
    assert len(launches) == 4
    split, merge = launches[0], launches[1]
    assert ncu.short_name(split.name) == "custom_kernel_ks_decode_split_0"
    assert split.duration_s == pytest.approx(41.5e-6) and split.dram_pct == pytest.approx(87.41)
    assert split.occupancy_limiter == "registers" and split.registers == 96 and split.grid == "(16, 8, 32)"
    assert "selected" not in split.stalls and split.stalls["long_scoreboard"] == pytest.approx(7.91)
    assert merge.occupancy_limiter == "barriers" or merge.occupancy_limiter == "registers"  # n/a shared_mem skipped
    assert "tex_throttle" not in merge.stalls  # n/a
    s = ncu.summarize(launches)
    assert s["launches"] == 4 and s["stalls"][0]["reason"] == "long_scoreboard"
    shares = {k["kernel"]: k["share"] for k in s["kernel_shares"]}
    assert shares["custom_kernel_ks_decode_merge_1"] == pytest.approx(0.078, abs=0.002)
    # Time-weighted: the long split kernel dominates the DRAM figure.
    assert 80 < s["dram_pct"] < 87.41


def test_a_real_h200_capture_is_read_whole() -> None:
    # ncu 2025.3.1 accepted every name of METRICS on the H200 (it refuses the whole list for one it does not know).
    launches = ncu.parse_csv(H200_CAPTURE.read_text())
    assert [ncu.short_name(k.name) for k in launches] == ["nvjet_sm90_hsh_256x128_64x4_1x2_h_bz_coopA_NNT",
                                                         "unrolled_elementwise_kernel", "softmax_warp_forward"]
    gemm = launches[0]
    assert gemm.tensor_pct and gemm.tensor_pct > 50 and gemm.occupancy_limiter == "registers"
    assert gemm.registers == 168 and gemm.block == "(384, 1, 1)" and gemm.duration_s and 1e-6 < gemm.duration_s < 1e-3
    assert all(k.dram_pct is not None and k.l2_hit_pct is not None and k.stalls for k in launches)
    summary = ncu.summarize(launches)
    assert summary["launches"] == 3 and {s["kernel"] for s in summary["kernel_shares"]} == {
        "nvjet_sm90_hsh_256x128_64x4_1x2_h_bz_coopA_NNT", "unrolled_elementwise_kernel", "softmax_warp_forward"}


def test_a_real_contained_mlx_capture_names_the_kernel_and_fires_the_rules_it_should() -> None:
    from ksearch.worldmodel.counters import fire

    launches = ncu.parse_csv(H200_CONTAINED.read_text())
    assert [ncu.short_name(k.name) for k in launches] == ["custom_kernel_gqa_decode_naive_float16_t_128"] * 2
    s = ncu.summarize(launches)
    # The naive decode kernel: one block per row, 168 registers a thread, waiting on memory at a fraction of DRAM.
    assert s["occupancy_limiter"] == "registers" and s["occupancy_pct"] < 35 and s["dram_pct"] < 5
    assert s["stalls"][0]["reason"] == "long_scoreboard"
    assert {"memory_latency_bound", "occupancy_limited_by_registers", "gpu_underused"} <= {f.rule for f in fire(s)}


def test_a_reordered_table_with_unknown_columns_and_no_units_row_is_read() -> None:
    text = ('"ID","Kernel Name","Some Future Column","gpu__time_duration.sum","sm__throughput.avg.pct_of_peak_'
            'sustained_elapsed"\n"0","k1","x","1,024","55.5"\n')
    (k,) = ncu.parse_csv(text)
    assert k.name == "k1" and k.sm_pct == 55.5 and k.duration_s == pytest.approx(1024e-9)
    with pytest.raises(ValueError):
        ncu.parse_csv("==PROF== Disconnected from process 1\n")


def test_failures_are_one_line() -> None:
    assert "ERR_NVGPUCTRPERM" in (ncu.failure_line(PERM) or "")
    lib = ncu.failure_line("==ERROR== Failed to initialize the profiler: LibraryNotLoaded") or ""
    assert "LibraryNotLoaded" in lib and "\n" not in lib
    assert ncu.failure_line("==PROF== Connected") is None
    launcher = ncu.failure_line("ERROR : nsight-compute directory is not found under /usr/local/cuda-13.0/bin/../ or "
                                "/opt/nvidia. Nsight Compute is not installed on your system.") or ""
    assert "KSEARCH_NCU" in launcher and "\n" not in launcher


def test_the_toolkits_launcher_is_replaced_by_the_newest_installation_it_would_pick(tmp_path: Path,
                                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    # A CUDA toolkit's bin/ncu looks for <toolkit>/nsight-compute-*/ when it starts; inside the sandbox that search
    # failed on the H200, so the profiler is started as the installation's own ncu, its folder made readable.
    toolkit = tmp_path / "cuda-13.0"
    launcher = _fake_ncu(tmp_path, "exit 0")
    (toolkit / "bin").mkdir(parents=True)
    os.symlink(launcher, toolkit / "bin" / "ncu")
    for version in ("2025.2.0", "2025.3.1", "2025.10.0-rc"):
        folder = tmp_path / "store" / version  # the installations live elsewhere, linked from the toolkit
        folder.mkdir(parents=True)
        shutil.copy(launcher, folder / "ncu")
        os.symlink(folder, toolkit / f"nsight-compute-{version}")
    monkeypatch.setenv("KSEARCH_NCU", str(toolkit / "bin" / "ncu"))
    exe = ncu.ncu_path()
    assert exe == str(tmp_path / "store" / "2025.10.0-rc" / "ncu")  # versions compare as numbers, not as text
    spec = sandbox.plan(str(tmp_path / "scratch"), 3, {}, "/nonexistent-src", "/nonexistent-origin", gpu=True,
                        profiler=exe)
    assert str(tmp_path / "store" / "2025.10.0-rc") in spec["read"]
    assert ncu.installation(str(tmp_path / "nowhere" / "bin" / "ncu")) == str(tmp_path / "nowhere" / "bin" / "ncu")


def test_ptxas_info_lines_give_each_kernels_resources() -> None:
    log = """ptxas info    : 0 bytes gmem
ptxas info    : Compiling entry function '_ZN3mlx4core2cu8ks_unit027custom_kernel_ks_decode_0EPK6__halfPf' for 'sm_90a'
ptxas info    : Function properties for _ZN3mlx4core2cu8ks_unit027custom_kernel_ks_decode_0EPK6__halfPf
    16 bytes stack frame, 8 bytes spill stores, 12 bytes spill loads
ptxas info    : Used 255 registers, used 1 barriers, 16384 bytes smem, 400 bytes cmem[0]
ptxas info    : Compiling entry function '_ZN3mlx4core2cu8ks_unit125custom_kernel_merge_2_1EPKfP6__half' for 'sm_90a'
ptxas info    : Function properties for _ZN3mlx4core2cu8ks_unit125custom_kernel_merge_2_1EPKfP6__half
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 32 registers, used 0 barriers, 384 bytes cmem[0]
"""
    a, b = parse_ptxas(log)
    assert (a.kernel, a.registers, a.spill_store_bytes, a.spill_load_bytes, a.static_smem_bytes) == (
        "ks_decode", 255, 8, 12, 16384)
    assert (b.kernel, b.registers, b.spill_store_bytes, b.static_smem_bytes) == ("merge_2", 32, 0, 0)


@pytest.mark.skipif(shutil.which("nvcc") is None and not os.environ.get("KSEARCH_NVCC"), reason="no nvcc")
def test_the_resource_report_compiles_a_starter_kernel() -> None:
    from ksearch.knowledge.resources import resource_report

    source = (Path(__file__).parents[1] / "src/ksearch/tasks/starters/softmax_cuda.py").read_text()
    kernels, why = resource_report(source, {"x": "T"})
    assert why is None and kernels and kernels[0].registers and kernels[0].spill_store_bytes == 0


def test_missing_ncu_is_one_line_and_the_rest_is_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    report = _profile(monkeypatch, None)
    assert report["status"] == "no_counters" and "ncu (Nsight Compute) not found" in report["note"]
    assert "\n" not in report["note"]
    assert "no mx.fast.cuda_kernel body" in report["resources_note"]  # an MLX-ops candidate has no kernel to compile


def test_the_roofline_fraction_only_on_metal_and_the_cpu() -> None:
    task = get_task("softmax")
    for backend in (Backend("mlx-cpu", "cpu"), Backend("mlx-metal", "metal")):
        report = profile_candidate(task, backend, CANDIDATE)
        assert report.status == "roofline_only" and "not available on " + backend.name in report.note


def test_no_counter_permission_is_one_line_and_the_candidate_still_ran(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    exe = _fake_ncu(tmp_path, f"echo '==PROF== Connected to process 1' >> \"$log\"\necho '{PERM}' >> \"$log\"\n"
                              "exec \"$@\"\n")
    report = _profile(monkeypatch, exe)
    assert report["status"] == "no_counters" and report["calls"] == 2, report
    assert "ERR_NVGPUCTRPERM" in report["note"] and "\n" not in report["note"]


def test_a_profiler_that_cannot_start_is_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    exe = _fake_ncu(tmp_path, "echo '==ERROR== Failed to initialize the profiler: LibraryNotLoaded' >&2\nexit 1\n")
    report = _profile(monkeypatch, exe)
    assert report["status"] == "no_counters" and "LibraryNotLoaded" in report["note"], report


def test_a_capture_is_read_back_from_the_contained_profiled_process(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    # The capture lies beside the fake profiler: inside the sandbox, only the profiler's own directory is readable.
    exe = _fake_ncu(tmp_path, "\"$@\"; code=$?\ncat \"$(dirname \"$0\")/capture.csv\" >> \"$log\"\nexit $code\n")
    shutil.copy(FIXTURE, Path(exe).parent / "capture.csv")
    report = _profile(monkeypatch, exe)
    assert report["status"] == "counters", report
    assert report["summary"]["launches_per_call"] == 2.0 and len(report["kernels"]) == 4
    line = summary_line(report)
    assert "DRAM 82% of peak" in line and "long_scoreboard" in line and "limited by registers" in line
    if sandbox.unavailable() is None:
        assert "loopback" in report["containment"].get("network", ""), report["containment"]


@pytest.mark.skipif(sandbox.unavailable() is not None, reason="no sandbox here")
def test_metrics_this_ncu_does_not_know_are_left_out_and_said(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # ncu refuses the whole list for one name it does not know; names change between versions and chips.
    exe = _fake_ncu(tmp_path, "\"$@\"; code=$?\ncat \"$(dirname \"$0\")/capture.csv\" >> \"$log\"\nexit $code\n")
    text = Path(exe).read_text().split("\n", 1)
    refuse = ("case \"$*\" in *sm__pipe_tensor_cycles_active*) echo '==ERROR== Failed to find metric "
              "regex:^sm__pipe_tensor_cycles_active\\.(sum|avg|min|max)$' >&2; exit 1;; esac")
    Path(exe).write_text(f"{text[0]}\n{refuse}\n{text[1]}")
    shutil.copy(FIXTURE, Path(exe).parent / "capture.csv")
    assert ncu.unknown_metrics("==ERROR== Failed to find metric regex:^sm__x_y\\.(sum|avg)$") == {"sm__x_y"}
    assert ncu.TENSOR not in ncu.without(ncu.METRICS, {"sm__pipe_tensor_cycles_active"})
    report = _profile(monkeypatch, exe)
    assert report["status"] == "counters", report
    assert "does not know sm__pipe_tensor_cycles_active" in report["note"], report["note"]


def test_the_profiler_mode_gives_a_loopback_on_the_profilers_ports_only(tmp_path: Path) -> None:
    script = tmp_path / "scratch" / "net.py"
    script.parent.mkdir()
    script.write_text("import socket\ns = socket.socket(); s.bind(('127.0.0.1', 49160)); s.listen(1)\n"
                      "c = socket.socket(); c.connect(('127.0.0.1', 49160)); print('profiler port ok')\n"
                      "try:\n    socket.socket().bind(('127.0.0.1', 8080)); print('other port open')\n"
                      "except OSError:\n    print('other port refused')\n"
                      "open('/dev/shm/ksearch-profiler-probe', 'w').write('x'); print('shm ok')\n"
                      # The profiled process is the profiler's child, a pid the rules cannot name: CUDA's runtime
                      # opens its threads' /proc entries for writing with truncation (without it, on the H200,
                      # cudaMallocManaged failed under ncu in the sandbox).
                      "import subprocess, sys\n"
                      "probe = 'import os; open(f\"/proc/self/task/{os.getpid()}/comm\", \"w\").write(\"probe\")'\n"
                      "subprocess.run([sys.executable, '-c', probe], check=True); print('own task entries ok')\n")
    r, w = os.pipe()
    spec = sandbox.plan(str(script.parent), w, dict(os.environ), str(Path(sandbox.__file__).parents[2]), "softmax",
                        gpu=True, profiler="/usr/bin/env")
    out = subprocess.run(sandbox.command(spec, ["/usr/bin/env", sys.executable, str(script)]), pass_fds=[w],
                         capture_output=True, text=True, timeout=60)
    os.close(w)
    os.close(r)
    if "landlock" not in out.stderr and "profiler port ok" not in out.stdout:
        pytest.skip(f"no network namespace here: {out.stderr[-300:]}")
    assert "profiler port ok" in out.stdout and "other port refused" in out.stdout, out.stderr[-1000:]
    # Its /dev/shm is its own: what it wrote there is not in the host's.
    assert "shm ok" in out.stdout and not Path("/dev/shm/ksearch-profiler-probe").exists(), out.stderr[-1000:]
    assert "own task entries ok" in out.stdout, out.stderr[-1000:]


def test_eval_profile_on_the_cpu_keeps_the_verdict_and_adds_the_roofline_only_profile() -> None:
    import json

    from typer.testing import CliRunner

    from ksearch.cli import app

    task = get_task("softmax")
    workload = next(w.name for w in task.workloads if w.tier == "cpu")
    starter = Path(__file__).parents[1] / "src/ksearch/tasks/starters/softmax_cpu.py"
    r = CliRunner().invoke(app, ["eval", "softmax", str(starter), "--backend", "mlx-cpu", "--workloads", workload,
                                 "--profile", "--json"])
    assert r.exit_code == 0, r.output
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert out["status"] == "passed" and out["profile"]["status"] == "roofline_only"
    assert "not available on mlx-cpu" in out["profile"]["note"] and out["profile"]["workload"] == workload
