"""benchmarks/prefill_host_work.py: the library prefill's Python work a call per CUDA configuration with MLX's kernel
calls stubbed, on the CPU build of MLX; the stubs and the pretended backend are undone afterwards; bad input is
refused in one line."""

import json
import subprocess
import sys
from pathlib import Path

from script_module import import_benchmark

SCRIPT = str(Path(__file__).resolve().parents[1] / "benchmarks/prefill_host_work.py")


def test_it_times_every_configuration_and_writes_its_figures(tmp_path):
    done = subprocess.run([sys.executable, SCRIPT, "--calls", "20", "--repeat", "2", "--out", str(tmp_path)],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    (path,) = tmp_path.glob("prefill-host-work-*.json")
    rows = json.loads(path.read_text())["figures"]
    assert [r["config"] for r in rows] == ["tma_wide", "tma_wide_persist", "bulk", "cp_async", "wgmma_sync",
                                          "mma_sync"]
    # each configuration ran its own kernel, none fell back to MLX's attention
    assert [r["kernel"] for r in rows] == ["ws3_n64_s4_p4_tmas_cr", "ws3_n64_s4_p4_tmas_pst_preg32_cr_wt_sn_uw_r1_xa",
                                          "ws3_n64_s4_p4_bulk_cr", "ws3_n64_s3_p4", "wg3_n64",
                                          "mma_sync_m128_n64_db"]
    for r in rows:
        assert min(r["call_s"], r["slice_s"]) > 0 and r["call_in_slices"] == r["call_s"] / r["slice_s"]


def test_the_stubs_do_not_outlive_the_measurement():
    import mlx.core as mx

    host_work = import_benchmark("prefill_host_work")
    from ksearch.kernels import device
    from ksearch.kernels.attention import cuda_prefill, wgmma_ws

    factory, map_input, backend, sms = mx.fast.cuda_kernel, wgmma_ws.map_input, device.backend, device.cuda_sm_count
    device.backend, device.cuda_sm_count = lambda: "cuda", lambda: 132
    try:
        rows = host_work.measure(5, 1)
    finally:
        device.backend, device.cuda_sm_count = backend, sms
    assert len(rows) == 6 and mx.fast.cuda_kernel is factory and wgmma_ws.map_input is map_input
    # no kernel or launch holding a stub is left cached
    assert cuda_prefill.build_kernel.cache_info().currsize == 0 and wgmma_ws._tma_launch.cache_info().currsize == 0


def test_bad_input_is_refused_in_one_line():
    done = subprocess.run([sys.executable, SCRIPT, "--calls", "0"], capture_output=True, text=True, timeout=300)
    assert done.returncode == 1 and done.stderr.strip() == "prefill_host_work: --calls and --repeat must be at least 1"
