"""benchmarks/wgmma_tile_ceiling.py without a GPU: every layout's kernel compiles for sm_90a as MLX wraps it, its
wgmmas unserialised and nothing spilled; the figures it derives; bad input refused in one line."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from ksearch.backends.nvcc import nvcc_path
from ksearch.kernels.device import hopper

ROOT = Path(__file__).parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
import wgmma_tile_ceiling as ceiling  # noqa: E402


def test_layouts_count_their_work() -> None:
    wide, n176 = ceiling.LAYOUTS["wide"], ceiling.LAYOUTS["n176"]
    assert wide.tile_flop() == 4 * 192 * 64 * 128 and wide.ideal_cycles() == 1536
    # S with 64 keys reads Q's and K's 4 KB a product of 32 cycles: the whole 128 bytes a cycle; P V half of it
    assert wide.smem_bytes_per_tile() / wide.ideal_cycles() == pytest.approx((8 * 4096 + 4 * 4096) / (8 * 32 + 4 * 64))
    assert n176.smem_bytes_per_tile() / n176.ideal_cycles() < 96
    assert ceiling.LAYOUTS["tall_rq"].smem_bytes_per_tile() < ceiling.LAYOUTS["tall"].smem_bytes_per_tile()


@pytest.mark.skipif(nvcc_path() is None, reason="nvcc not installed")
def test_every_layout_compiles_without_serialised_wgmma_or_spills() -> None:
    from ksearch.backends.nvcc import compile_check, wrap
    from ksearch.knowledge.resources import parse_ptxas

    units = [wrap(f"ceiling_{name}_{i}", ceiling.source(layout), ceiling.header(layout), [("x", "float16"),
                  ("tiles", "int32")], [("cycles", "int64"), ("sink", "float32")], scope=f"ceiling_{name}")
             for i, (name, layout) in enumerate(ceiling.LAYOUTS.items())]
    ok, log = compile_check(units)
    assert ok, log[-3000:]
    assert "C751" not in log, log[-3000:]  # C7510-C7515: every wgmma serialised
    reports = parse_ptxas(log)
    assert len(reports) == len(ceiling.LAYOUTS) and all(r.spill_store_bytes == 0 for r in reports), log[-3000:]


def test_unknown_layout_is_refused_in_one_line(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks/wgmma_tile_ceiling.py"), str(tmp_path),
                           "--layouts", "wide,huge"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 1 and done.stderr.strip().splitlines() == [
        "unknown layout huge: use " + ", ".join(ceiling.LAYOUTS)]


@pytest.mark.skipif(hopper(), reason="a Hopper GPU is here: the benchmark would run")
def test_without_a_hopper_gpu_it_says_so_in_one_line(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks/wgmma_tile_ceiling.py"), str(tmp_path),
                           "--layouts", "wide"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 1 and done.stderr.strip().splitlines() == [
        "wgmma_tile_ceiling: wgmma needs MLX's CUDA backend on a Hopper GPU (sm_90); run it on one"]
    assert not list(tmp_path.iterdir())  # nothing written


def test_a_count_below_one_is_refused_in_one_line(tmp_path: Path) -> None:
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks/wgmma_tile_ceiling.py"), str(tmp_path),
                           "--tiles", "0"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 1 and done.stderr.strip().splitlines() == [
        "--tiles, --blocks and --calls take a positive count"]
