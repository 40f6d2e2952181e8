"""GPU checks of the one-launch cluster decode and the tensor-core kernel without clusters (marker `gpu`: skipped in CI;
run on the H200 with mlx-cuda). Each runs in a process of its own; the cluster kernel's with MLX_USE_CUDA_GRAPHS=0,
which MLX reads when it starts and that kernel requires."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.gpu
ROOT = Path(__file__).parents[1]

THROUGH_THE_LIBRARY = r"""
import importlib, math
import mlx.core as mx
from ksearch.kernels.decode.cuda_cluster import ClusterConfig
kd = importlib.import_module("ksearch.kernels.decode")
mx.random.seed(0)
for b, hq, hkv, cap, n, d, dt in [(1, 32, 8, 4352, 4096, 128, mx.float16), (4, 32, 8, 8448, 8192, 64, mx.bfloat16),
                                  (16, 32, 8, 1300, 1000, 128, mx.float16)]:
    q = mx.random.normal((b, hq, 1, d)).astype(dt)
    kc = mx.random.normal((b, hkv, cap, d)).astype(dt)
    vc = mx.random.normal((b, hkv, cap, d)).astype(dt)
    assert kd.decode_plan(q, kc, vc, n, config=ClusterConfig())[0] == "cluster"
    g = hq // hkv
    k = mx.repeat(kc[:, :, :n].astype(mx.float32), g, axis=1)
    v = mx.repeat(vc[:, :, :n].astype(mx.float32), g, axis=1)
    ref = mx.softmax((q.astype(mx.float32) @ k.transpose(0, 1, 3, 2)) / math.sqrt(d), axis=-1) @ v
    for out in (kd.decode(q, kc, vc, n, config=ClusterConfig()), kd.decode(q, kc, vc, n)):  # then split-K after it
        err = mx.max(mx.abs(out.astype(mx.float32) - ref)).item()
        assert err < (2e-2 if dt == mx.bfloat16 else 4e-3), (b, n, d, dt, err)
print("ok")
"""


def _run(args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "MLX_USE_CUDA_GRAPHS": "0", **env}
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, env=env, timeout=600)


def test_cluster_decode_matches_fp32_with_graphs_off() -> None:
    pytest.importorskip("mlx.core")
    proc = _run([str(ROOT / "benchmarks" / "decode_cluster_check.py"), "check"], {"KSEARCH_CLUSTER_CONFIGS": "5,3,6"})
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]


def test_decode_with_a_cluster_config_runs_it_and_leaves_later_kernels_intact() -> None:
    pytest.importorskip("mlx.core")
    proc = _run(["-c", THROUGH_THE_LIBRARY], {})
    assert proc.returncode == 0 and "ok" in proc.stdout, (proc.stdout + proc.stderr)[-4000:]


TENSOR_COPIES = r"""
import importlib, math
import mlx.core as mx
from ksearch.kernels.decode.cuda_cluster import ClusterConfig
kd = importlib.import_module("ksearch.kernels.decode")
cfg = ClusterConfig(consumers=4, producers=0, slots=3, cluster=False, tma=True)
mx.random.seed(0)
def ref(q, kc, vc, n):
    g = q.shape[1] // kc.shape[1]
    k = mx.repeat(kc[:, :, :n].astype(mx.float32), g, axis=1)
    v = mx.repeat(vc[:, :, :n].astype(mx.float32), g, axis=1)
    d = q.shape[-1]
    return mx.softmax((q.astype(mx.float32) @ k.transpose(0, 1, 3, 2)) / math.sqrt(d), axis=-1) @ v
for b, hq, hkv, cap, n, d, dt in [(1, 32, 8, 4352, 4096, 128, mx.float16), (4, 32, 8, 8448, 8192, 64, mx.bfloat16),
                                  (3, 16, 4, 9000, 8191, 128, mx.float16), (2, 8, 1, 5000, 4999, 64, mx.float16)]:
    q = mx.random.normal((b, hq, 1, d)).astype(dt)
    kc = mx.random.normal((b, hkv, cap, d)).astype(dt)
    vc = mx.random.normal((b, hkv, cap, d)).astype(dt)
    kc[:, :, n:] = mx.nan  # rows past the length reach the tile's last rows: never in the result
    vc[:, :, n:] = mx.nan
    assert kd.decode_plan(q, kc, vc, n, config=cfg)[0] == "mma_split"
    err = mx.max(mx.abs(kd.decode(q, kc, vc, n, config=cfg).astype(mx.float32) - ref(q, kc, vc, n))).item()
    assert err < (2e-2 if dt == mx.bfloat16 else 4e-3), (b, n, d, dt, err)
# A cache whose rows are not D apart (a view of wider rows): NaN or the right numbers, never a wrong one.
q = mx.random.normal((1, 32, 1, 128)).astype(mx.float16)
kc = mx.random.normal((1, 8, 4352, 136)).astype(mx.float16)[..., :128]
vc = mx.random.normal((1, 8, 4352, 128)).astype(mx.float16)
out = kd.decode(q, kc, vc, 4096, config=cfg).astype(mx.float32)
assert mx.all(mx.isnan(out)).item() or mx.max(mx.abs(out - ref(q, kc, vc, 4096))).item() < 4e-3
print("ok")
"""


def test_the_tensor_copy_variant_matches_fp32_under_cuda_graphs() -> None:
    pytest.importorskip("mlx.core")
    proc = _run(["-c", TENSOR_COPIES], {"MLX_USE_CUDA_GRAPHS": "1"})
    assert proc.returncode == 0 and "ok" in proc.stdout, (proc.stdout + proc.stderr)[-4000:]


# The imports and the fp32 reference of the tensor-core kernel's checks below (each script starts with them).
REFERENCE = r"""
import importlib, math
import mlx.core as mx
from ksearch.kernels.decode import cuda_cluster as DC
kd = importlib.import_module("ksearch.kernels.decode")
mx.random.seed(0)
def ref(q, kc, vc, n):
    g = q.shape[1] // kc.shape[1]
    k = mx.repeat(kc[:, :, :n].astype(mx.float32), g, axis=1)
    v = mx.repeat(vc[:, :, :n].astype(mx.float32), g, axis=1)
    return mx.softmax((q.astype(mx.float32) @ k.transpose(0, 1, 3, 2)) / math.sqrt(q.shape[-1]), axis=-1) @ v
"""

ONE_SPLIT = REFERENCE + r"""cfg = DC.ClusterConfig(consumers=4, producers=0, slots=3, cluster=False)
for b, hq, hkv, cap, n, d, dt in [(16, 32, 8, 4352, 4097, 128, mx.float16), (24, 32, 8, 2304, 2000, 64, mx.bfloat16),
                                  (9, 64, 8, 1100, 1000, 128, mx.bfloat16)]:
    q = mx.random.normal((b, hq, 1, d)).astype(dt)
    kc = mx.random.normal((b, hkv, cap, d)).astype(dt)
    vc = mx.random.normal((b, hkv, cap, d)).astype(dt)
    kc[:, :, n:] = mx.nan
    vc[:, :, n:] = mx.nan
    assert DC.wave_splits(b * hkv, n, d, hq // hkv, cfg) == 1, (b, hkv, d)  # the shapes take the one-split path
    err = mx.max(mx.abs(kd.decode(q, kc, vc, n, config=cfg).astype(mx.float32) - ref(q, kc, vc, n))).item()
    assert err < (2e-2 if dt == mx.bfloat16 else 4e-3), (b, n, d, dt, err)
    # and a later custom kernel (split-K) still runs under the same graphs
    split_k = kd.decode_config(q, kc, n)
    err = mx.max(mx.abs(kd.decode(q, kc, vc, n, config=split_k).astype(mx.float32) - ref(q, kc, vc, n))).item()
    assert err < (2e-2 if dt == mx.bfloat16 else 4e-3), ("split-K after", b, n, d, dt, err)
    if (b, n) == (16, 4097):  # more than 64 MiB of K/V: the library's own dispatch takes the same kernel
        assert kd.decode_plan(q, kc, vc, n)[0] == "mma_split"
        err = mx.max(mx.abs(kd.decode(q, kc, vc, n).astype(mx.float32) - ref(q, kc, vc, n))).item()
        assert err < (2e-2 if dt == mx.bfloat16 else 4e-3), ("library", b, n, d, dt, err)
# B 1 just past 64 MiB: the library's dispatch takes the kernel with many splits a pair, then split-K's merge
q = mx.random.normal((1, 32, 1, 128)).astype(mx.float16)
kc, vc = (mx.random.normal((1, 8, 16400, 128)).astype(mx.float16) for _ in range(2))
assert kd.decode_plan(q, kc, vc, 16385)[0] == "mma_split" and DC.wave_splits(8, 16385, 128, 4, cfg) > 1
err = mx.max(mx.abs(kd.decode(q, kc, vc, 16385).astype(mx.float32) - ref(q, kc, vc, 16385))).item()
assert err < 4e-3, ("library at B 1", err)
print("ok")
"""


def test_one_split_a_head_writes_the_output_itself_under_cuda_graphs() -> None:
    pytest.importorskip("mlx.core")
    proc = _run(["-c", ONE_SPLIT], {"MLX_USE_CUDA_GRAPHS": "1"})
    assert proc.returncode == 0 and "ok" in proc.stdout, (proc.stdout + proc.stderr)[-4000:]


FEW_MERGE = REFERENCE + r"""cfg = DC.ClusterConfig(consumers=4, producers=0, slots=3, cluster=False, few_merge=True)
splits = set()
for b, hq, hkv, cap, n, d, dt in [(8, 32, 8, 16500, 16384, 128, mx.float16), (4, 32, 8, 8448, 8192, 128, mx.bfloat16),
                                  (5, 16, 4, 3000, 2999, 64, mx.float16), (1, 32, 8, 4352, 4096, 128, mx.float16)]:
    q = mx.random.normal((b, hq, 1, d)).astype(dt)
    kc = mx.random.normal((b, hkv, cap, d)).astype(dt)
    vc = mx.random.normal((b, hkv, cap, d)).astype(dt)
    kc[:, :, n:] = mx.nan
    vc[:, :, n:] = mx.nan
    splits.add(DC.wave_splits(b * hkv, n, d, hq // hkv, cfg))
    err = mx.max(mx.abs(kd.decode(q, kc, vc, n, config=cfg).astype(mx.float32) - ref(q, kc, vc, n))).item()
    assert err < (2e-2 if dt == mx.bfloat16 else 4e-3), (b, n, d, dt, err)
assert {2, 4} <= splits and max(splits) > 4, splits  # the one-read merge at 2 and 4 splits, the other past 4
print("ok")
"""


def test_the_one_read_merge_matches_fp32_and_leaves_more_splits_to_the_other() -> None:
    pytest.importorskip("mlx.core")
    proc = _run(["-c", FEW_MERGE], {"MLX_USE_CUDA_GRAPHS": "1"})
    assert proc.returncode == 0 and "ok" in proc.stdout, (proc.stdout + proc.stderr)[-4000:]
