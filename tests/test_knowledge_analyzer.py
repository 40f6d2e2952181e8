"""The CUDA analyzer on kernels the tests carry: a reduction, a tiled matmul, FlashAttention-style, a selective scan."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ksearch.knowledge import load_patterns
from ksearch.knowledge.analyzer import analyze_cuda

CUDA = Path(__file__).parent / "data" / "cuda"


def _ctx(name: str, backend: str = "mlx-cuda") -> dict:
    return analyze_cuda((CUDA / f"{name}.cu").read_text(), backend)


def _concept_line(ctx: dict, concept: str) -> int:
    return next(f["line"] for f in ctx["findings"] if f["concept"] == concept)


def test_reduction() -> None:
    ctx = _ctx("reduction")
    assert ctx["kind_guess"] == "reduction"
    assert ctx["kernels"] == [{"name": "row_sum", "line": 4}]
    assert {"shared_memory", "syncthreads", "warp_shuffle_down_up", "atomic_add", "ldg", "init_value"} <= set(
        ctx["concepts"])
    assert ctx["patterns"][:2] == ["simd_register_reduction", "block_per_row"]
    assert _concept_line(ctx, "syncthreads") == 10


def test_tiled_matmul() -> None:
    ctx = _ctx("tiled_matmul", "mlx-metal")
    assert ctx["kind_guess"] == "matmul"
    assert ctx["patterns"][0] == "threadgroup_tiling" and "tensor_core_mma" in ctx["patterns"]
    assert {"launch_bounds", "shared_memory", "bank_conflicts", "pragma_unroll"} <= set(ctx["concepts"])
    assert [w["concept"] for w in ctx["warnings"]] == ["launch_bounds"]
    shared = next(f for f in ctx["findings"] if f["concept"] == "shared_memory")
    assert "threadgroup" in shared["target"] and any("32 KB" in c for c in shared["constraints"])


def test_flash_attention() -> None:
    cuda, metal = _ctx("flash_attention"), _ctx("flash_attention", "mlx-metal")
    for ctx in (cuda, metal):
        assert ctx["kind_guess"] == "attention"
        assert {"online_softmax", "exp2_trick", "causal_block_skipping", "threadgroup_tiling"} <= set(ctx["patterns"])
        assert {"cp_async", "wmma", "exp2_scaling", "dynamic_shared_memory", "causal_mask_alignment"} <= set(
            ctx["concepts"])
    # cp.async works from an MLX-CUDA kernel but has no Metal form; <mma.h> is the reverse on MLX-CUDA.
    assert {w["concept"] for w in metal["warnings"]} >= {"cp_async", "dynamic_shared_memory"}
    assert "wmma" in {w["concept"] for w in cuda["warnings"]}
    assert "dynamic_shared_memory" not in {w["concept"] for w in cuda["warnings"]}
    alt = next(w for w in metal["warnings"] if w["concept"] == "cp_async")["message"]
    assert "plain device loads" in alt


def test_selective_scan() -> None:
    ctx = _ctx("selective_scan")
    assert ctx["kind_guess"] == "scan"
    assert ctx["patterns"][:2] == ["warp_level_scan", "chunked_scan_carried_prefix"]
    assert {"warp_scan", "exp2_scaling", "half_types"} <= set(ctx["concepts"])
    assert not ctx["warnings"]


def test_cpu_backend_points_at_mlx_ops_patterns() -> None:
    ctx = _ctx("selective_scan", "mlx-cpu")
    assert ctx["patterns"][0] == "chunked_scan_ops"
    assert any("no custom kernels" in w["message"] for w in ctx["warnings"])


@pytest.mark.parametrize("name", ["reduction", "tiled_matmul", "flash_attention", "selective_scan"])
def test_context_is_json_and_patterns_are_known_ids(name: str) -> None:
    for backend in ("mlx-cuda", "mlx-metal", "mlx-cpu"):
        ctx = _ctx(name, backend)
        assert json.loads(json.dumps(ctx)) == ctx
        known = {p["id"] for p in load_patterns() if backend in p["backends"]}
        assert ctx["patterns"] and set(ctx["patterns"]) <= known
        assert all(isinstance(f["line"], int) for f in ctx["findings"])


def test_unknown_backend() -> None:
    with pytest.raises(ValueError):
        analyze_cuda("__global__ void k() {}", "cuda")
