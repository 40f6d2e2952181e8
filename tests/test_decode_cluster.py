"""The one-launch cluster decode (ksearch/kernels/decode/cuda_cluster.py): it compiles for sm_90a without spills at the
configurations the H200 measured, its split count keeps one wave, and it only ever runs with MLX's CUDA graphs off
(under MLX 0.32's graphs a cluster kernel stops later custom kernels from running)."""

from __future__ import annotations

import importlib
import re

import mlx.core as mx
import pytest

from ksearch.backends.nvcc import compile_check, nvcc_path, wrap
from ksearch.kernels import device
from ksearch.kernels.decode import cuda_cluster as DC

kd = importlib.import_module("ksearch.kernels.decode")  # the package re-exports a function of that name

CONFIGS = [DC.ClusterConfig(), DC.ClusterConfig(consumers=4, producers=2), DC.ClusterConfig(keys=64),
           DC.ClusterConfig(consumers=8, producers=2, keys=16),
           DC.ClusterConfig(consumers=4, producers=0, slots=3)]  # no producer warp: each consumer copies its tiles


@pytest.mark.slow
@pytest.mark.skipif(nvcc_path() is None, reason="nvcc not installed")
def test_cluster_decode_compiles_for_sm90a_without_spills() -> None:
    units, budgets = [], []
    prefix = DC.header(CONFIGS[0], 1).index("\n#undef __global__")  # the helpers' length, the same in every header
    for i, (cfg, dt, d, g, cs) in enumerate([(CONFIGS[0], "float16", 128, 4, 8), (CONFIGS[0], "bfloat16", 64, 1, 1),
                                             (CONFIGS[1], "float16", 128, 8, 4), (CONFIGS[2], "bfloat16", 128, 16, 2),
                                             (CONFIGS[3], "float16", 64, 4, 8),
                                             # no cluster dims, no producer warp: the graph-safe variant's one split
                                             (CONFIGS[4], "float16", 128, 4, 1), (CONFIGS[4], "bfloat16", 64, 8, 1)]):
        header = DC.header(cfg, cs) if i == 0 else DC.header(cfg, cs)[prefix:]  # the helpers once per unit
        units.append(wrap(f"cl{i}", DC.SOURCE, header, [("q", "T"), ("k", "T"), ("v", "T")], [("o", "T")],
                          DC.template(dt, d, g, cfg, cs)))
        budgets.append(65536 // cfg.threads())
    # The graph-safe variant's ending (partials to global memory) at two of them.
    for i, (cfg, dt, d, g) in enumerate([(CONFIGS[0], "float16", 128, 4), (CONFIGS[1], "bfloat16", 64, 8),
                                         (CONFIGS[4], "float16", 128, 4), (CONFIGS[4], "bfloat16", 64, 16)]):
        units.append(wrap(f"parts{i}", DC.PARTS_SOURCE, DC.header(cfg, 1)[prefix:],
                          [("q", "T"), ("k", "T"), ("v", "T")], [("part_acc", "float32"), ("part_ml", "float32")],
                          DC.template(dt, d, g, cfg, 0)))
        budgets.append(65536 // cfg.threads())
    # Tensor copies (TMA) into the same consumers: the map's input and the scratch output for the published maps.
    tma = DC.ClusterConfig(consumers=4, producers=0, slots=3, cluster=False, tma=True)
    for i, (dt, d, g) in enumerate([("float16", 128, 4), ("bfloat16", 64, 8)]):
        units.append(wrap(f"tma{i}", DC.PARTS_TMA_SOURCE, DC.header(tma, 1)[prefix:] if i == 0 else "",
                          [("q", "T"), ("k", "T"), ("v", "T"), ("tmap", "uint64")],
                          [("part_acc", "float32"), ("part_ml", "float32"), ("maps", "uint64")],
                          DC.template(dt, d, g, tma, 0)))
        budgets.append(65536 // tma.threads())
    ok, log = compile_check(units)
    assert ok, log[-3000:]
    regs = [int(r) for r in re.findall(r"Used (\d+) registers", log)]
    assert len(regs) == len(units) and all(r <= b for r, b in zip(regs, budgets, strict=True)), regs
    assert set(re.findall(r"(\d+) bytes spill stores", log)) == {"0"}, log[-2000:]


@pytest.mark.parametrize("bh,length,d,g", [(8, 4096, 128, 4), (64, 16384, 128, 4), (128, 32768, 128, 4),
                                           (256, 4096, 64, 8), (3, 100, 128, 16), (1, 1, 64, 1)])
@pytest.mark.parametrize("cfg", CONFIGS, ids=repr)
def test_splits_keep_one_wave_and_at_least_two_tiles_each(bh: int, length: int, d: int, g: int,
                                                          cfg: DC.ClusterConfig) -> None:
    cs = DC.cluster_size(bh, length, d, g, cfg)
    assert cs in (1, 2, 4, 8) and cs <= cfg.max_cluster
    if cs > 1:
        assert bh * cs <= cfg.sms * cfg.blocks_per_sm(d, g)
        assert -(-length // cfg.keys) >= 2 * cs
    assert cfg.smem_bytes(d, g) <= 227 * 1024


def test_bad_configurations_say_what_to_change() -> None:
    assert "multiple of 16" in (DC.config_problem(DC.ClusterConfig(keys=24)) or "")
    assert "portable" in (DC.config_problem(DC.ClusterConfig(max_cluster=16)) or "")
    assert "shared memory" in (DC.config_problem(DC.ClusterConfig(consumers=8, keys=128, slots=4)) or "")
    assert "producers 0-4" in (DC.config_problem(DC.ClusterConfig(producers=5)) or "")
    assert "tma=1 takes producers=0" in (DC.config_problem(DC.ClusterConfig(tma=True)) or "")
    assert "tma=1 takes producers=0" in (DC.config_problem(DC.ClusterConfig(producers=0, tma=True)) or "")
    assert DC.config_problem(DC.ClusterConfig(producers=0, cluster=False, tma=True)) is None
    assert DC.config_problem(DC.ClusterConfig()) is None


def test_the_cluster_kernel_runs_only_with_cuda_graphs_off(monkeypatch: pytest.MonkeyPatch) -> None:
    q = mx.zeros((1, 8, 1, 128), dtype=mx.float16)
    kc = mx.zeros((1, 2, 512, 128), dtype=mx.float16)
    cfg = DC.ClusterConfig()
    assert kd.decode_plan(q, kc, kc, 300, config=cfg)[0] == "native"  # this machine: CPU
    monkeypatch.setattr(device, "backend", lambda: "cuda")
    monkeypatch.setattr(device, "hopper", lambda: False)
    assert kd.decode_plan(q, kc, kc, 300, config=cfg)[0] == "native"  # clusters and cp.async: Hopper only
    monkeypatch.setattr(device, "hopper", lambda: True)
    monkeypatch.delenv("MLX_USE_CUDA_GRAPHS", raising=False)
    with pytest.raises(ValueError, match="MLX_USE_CUDA_GRAPHS=0"):
        kd.decode_plan(q, kc, kc, 300, config=cfg)
    with pytest.raises(ValueError, match="MLX_USE_CUDA_GRAPHS=0"):
        DC.decode_cluster(q, kc, kc, 300, cfg)  # the kernel itself refuses too, before building anything
    monkeypatch.setenv("MLX_USE_CUDA_GRAPHS", "1")
    with pytest.raises(ValueError, match="silently do not run"):
        kd.decode(q, kc, kc, 300, config=cfg)
    monkeypatch.setenv("MLX_USE_CUDA_GRAPHS", "0")
    assert kd.decode_plan(q, kc, kc, 300, config=cfg)[0] == "cluster"
    assert kd.decode_plan(q, kc, kc, 300)[0] == "split_k"  # the default is unchanged
    assert kd.decode_plan(q.astype(mx.float32), kc.astype(mx.float32), kc.astype(mx.float32), 300,
                          config=cfg)[0] == "native"


@pytest.mark.parametrize("bh,length,d,g", [(8, 4096, 128, 4), (128, 16384, 128, 4), (512, 4096, 128, 4),
                                           (3, 100, 128, 16), (1, 1, 64, 1)])
def test_without_clusters_the_splits_fill_one_wave(bh: int, length: int, d: int, g: int) -> None:
    cfg = DC.ClusterConfig(cluster=False)
    ns = DC.wave_splits(bh, length, d, g, cfg)
    assert ns >= 1
    room = cfg.sms * cfg.blocks_per_sm(d, g)
    if ns > 1:
        assert bh * ns <= room and -(-length // cfg.keys) >= 2 * ns  # one wave, two tiles a split at least
        assert bh * (ns + 1) > room or -(-length // cfg.keys) < 2 * (ns + 1)  # and no more would fit


def test_the_kernel_without_clusters_runs_under_cuda_graphs(monkeypatch: pytest.MonkeyPatch) -> None:
    q = mx.zeros((1, 8, 1, 128), dtype=mx.float16)
    kc = mx.zeros((1, 2, 512, 128), dtype=mx.float16)
    monkeypatch.setattr(device, "backend", lambda: "cuda")
    monkeypatch.setattr(device, "hopper", lambda: True)
    monkeypatch.delenv("MLX_USE_CUDA_GRAPHS", raising=False)
    assert kd.decode_plan(q, kc, kc, 300, config=DC.ClusterConfig(cluster=False))[0] == "mma_split"
    monkeypatch.setattr(device, "hopper", lambda: False)
    assert kd.decode_plan(q, kc, kc, 300, config=DC.ClusterConfig(cluster=False))[0] == "native"


def test_the_library_gives_large_calls_to_the_tensor_core_kernel(monkeypatch: pytest.MonkeyPatch) -> None:
    # Shapes only: decode_plan builds nothing, so these arrays are never allocated.
    def plan(b: int, hkv: int, length: int, d: int = 128, dtype: mx.Dtype = mx.float16, **kw: object) -> str:
        q = mx.zeros((b, 4 * hkv, 1, d), dtype=dtype)
        kc = mx.zeros((b, hkv, length + 256, d), dtype=dtype)
        return kd.decode_plan(q, kc, kc, length, **kw)[0]

    kd._mma_fits.cache_clear()
    monkeypatch.setattr(device, "backend", lambda: "cuda")
    monkeypatch.setattr(device, "hopper", lambda: True)
    try:
        assert plan(16, 8, 16384) == "mma_split"  # 512 MiB over 128 pairs
        assert plan(1, 8, 16385) == "mma_split" and plan(1, 8, 16384) == "split_k"  # more than 64 MiB, any pairs
        assert plan(1, 2, 65537) == "mma_split" and plan(4, 8, 4096) == "split_k"
        assert plan(16, 8, 16384, d=64) == "split_k"  # measured at D=128 only
        assert plan(16, 8, 16384, config=kd.decode_config(mx.zeros((16, 32, 1, 128)), mx.zeros((16, 8, 1, 128)),
                                                          16384)) == "split_k"  # a configuration asks for split-K
        monkeypatch.setattr(device, "hopper", lambda: False)
        kd._mma_fits.cache_clear()
        assert plan(16, 8, 16384) == "split_k"  # no tensor-core decode off Hopper
    finally:
        kd._mma_fits.cache_clear()
