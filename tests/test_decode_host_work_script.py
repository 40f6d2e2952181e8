"""benchmarks/decode_host_work.py: the library decode's Python work a call with MLX's kernel calls stubbed, on the CPU
build of MLX; the stubs and the pretended backend are undone afterwards; bad input is refused in one line."""

import json
import subprocess
import sys
from pathlib import Path

from script_module import import_benchmark

SCRIPT = str(Path(__file__).resolve().parents[1] / "benchmarks/decode_host_work.py")


def test_it_times_every_shape_and_writes_its_figures(tmp_path):
    done = subprocess.run([sys.executable, SCRIPT, "--calls", "20", "--repeat", "2", "--shapes", "1x64,2x640,16x4096",
                           "--out", str(tmp_path)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    (path,) = tmp_path.glob("decode-host-work-*.json")
    rows = json.loads(path.read_text())["figures"]
    assert [(r["B"], r["length"]) for r in rows] == [(1, 64), (2, 640), (16, 4096)]
    # as on the H200: 256 MiB of K/V over 128 (batch, kv head) pairs go to the tensor-core kernel
    assert [r["kernel"] for r in rows] == ["split_k", "split_k", "mma_split"]
    for r in rows:
        assert min(r["decode_s"], r["plan_s"], r["slice_s"]) > 0
        assert r["decode_in_slices"] == r["decode_s"] / r["slice_s"]


def test_the_stubs_do_not_outlive_the_measurement():
    import mlx.core as mx

    host_work = import_benchmark("decode_host_work")
    from ksearch.kernels import device
    from ksearch.kernels.decode import cuda_cluster, cuda_split_k

    kernels, backend, hopper = cuda_split_k._kernels, device.backend, device.hopper
    mma_kernels = cuda_cluster._parts_kernel, cuda_cluster._kernel
    device.backend, device.hopper = lambda: "cuda", lambda: True
    try:
        row = host_work.measure(1, 64, 5, 1)
        mma_row = host_work.measure(16, 4096, 5, 1)
    finally:
        device.backend, device.hopper = backend, hopper
    assert row["decode_s"] > 0 and cuda_split_k._kernels is kernels
    assert mma_row["kernel"] == "mma_split" and (cuda_cluster._parts_kernel, cuda_cluster._kernel) == mma_kernels
    assert cuda_cluster.parts_launch.cache_info().currsize == 0  # no launch holding a stub is left cached
    q = mx.zeros((1, 32, 1, 128), dtype=mx.float16)
    kc = mx.zeros((1, 8, 320, 128), dtype=mx.float16)
    launch = cuda_split_k.launch_for(q, kc, kc)
    assert launch is not None and launch.made == []  # the next real call takes the real kernels


def test_bad_input_is_refused_in_one_line():
    for args, want in ((["--shapes", "1by64"], "BxLENGTH"), (["--calls", "0"], "at least 1")):
        done = subprocess.run([sys.executable, SCRIPT, *args], capture_output=True, text=True, timeout=300)
        assert done.returncode == 1 and done.stderr.strip().startswith("decode_host_work: "), done.stderr
        assert want in done.stderr and len(done.stderr.strip().splitlines()) == 1
