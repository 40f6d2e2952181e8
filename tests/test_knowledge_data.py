"""The knowledge data: schema-valid, internally consistent, and carrying what others rely on."""

from __future__ import annotations

import json
import re
from pathlib import Path

import jsonschema
import pytest
import yaml

from ksearch.backends.profiles import PROFILES_FILE, PROFILES_SCHEMA, match_profile
from ksearch.knowledge import (
    DATA,
    SCHEMAS,
    by_id,
    load_assertions,
    load_concepts,
    load_hardware,
    load_patterns,
    patterns_for,
)
from ksearch.knowledge.lint_rules import COMMON_WARNINGS, CUDA_IN_METAL, METAL_IN_CUDA

REQUIRED_PATTERNS = {
    "threadgroup_tiling", "online_softmax", "k_transposition", "exp2_trick", "simd_register_reduction",
    "vectorized_loads", "double_buffering", "loop_unrolling", "blelloch_scan", "hillis_steele_scan", "warp_level_scan",
    "chunked_scan_carried_prefix", "split_k_decode_lse_merge", "gqa_head_grouping", "fused_epilogue", "tensor_core_mma",
    "causal_block_skipping", "block_per_row", "multi_row_per_block", "mx_compile_fusion", "fused_expression",
    "chunked_scan_ops", "blocked_attention_ops",
}
REQUIRED_CONCEPTS = {
    "shared_memory", "syncthreads", "warp_shuffle_xor", "warp_reduce", "warp_vote", "atomic_add", "ldg",
    "vectorized_loads", "cp_async", "tma", "wmma", "mma_sync", "wgmma", "fast_exp", "exp2_scaling", "thread_index",
    "block_index", "global_thread_id", "grid_semantics", "bounds_check", "occupancy", "bank_conflicts",
    "launch_bounds", "streams", "unified_memory",
}


@pytest.mark.parametrize(("data", "schema_file"), [
    *((DATA / f"{name}.yaml", SCHEMAS / f"{name}.schema.json") for name in ("concepts", "patterns", "assertions")),
    (PROFILES_FILE, PROFILES_SCHEMA),
], ids=["concepts", "patterns", "assertions", "hardware"])
def test_yaml_matches_its_schema(data: Path, schema_file: Path) -> None:
    schema = json.loads(schema_file.read_text())
    jsonschema.Draft202012Validator.check_schema(schema)
    jsonschema.validate(yaml.safe_load(data.read_text()), schema)


def test_loaded_patterns_still_match_the_schema_after_inlining() -> None:
    schema = json.loads((SCHEMAS / "patterns.schema.json").read_text())
    jsonschema.validate({"patterns": load_patterns()}, schema)
    for p in load_patterns():
        assert not any(v.startswith("@exemplars/") for v in p["exemplars"].values()), p["id"]


def test_counts_and_unique_ids() -> None:
    for rows in (load_concepts(), load_patterns(), load_assertions(), load_hardware()):
        ids = [r["id"] for r in rows]
        assert len(ids) == len(set(ids))
    assert len(load_concepts()) >= 40 and len(load_patterns()) >= 15


def test_required_ids_present() -> None:
    assert {p["id"] for p in load_patterns()} >= REQUIRED_PATTERNS
    assert {c["id"] for c in load_concepts()} >= REQUIRED_CONCEPTS


def test_cross_references_resolve() -> None:
    concepts, assertions = by_id(load_concepts()), by_id(load_assertions())
    for p in load_patterns():
        assert set(p["concepts"]) <= set(concepts), (p["id"], set(p["concepts"]) - set(concepts))
        assert set(p["assertions"]) <= set(assertions), (p["id"], set(p["assertions"]) - set(assertions))
    for _, _, _, concept in CUDA_IN_METAL + METAL_IN_CUDA + COMMON_WARNINGS:
        assert concept in concepts, concept


def test_detect_regexes_compile() -> None:
    for c in load_concepts():
        for rx in c["detect"]:
            re.compile(rx)


def test_gpu_patterns_have_both_dialects_and_cpu_patterns_have_mlx() -> None:
    for p in load_patterns():
        gpu = {"mlx-cuda", "mlx-metal"} & set(p["backends"])
        if gpu and "mlx-cpu" not in p["backends"]:
            assert {"cuda", "metal"} <= set(p["exemplars"]), p["id"]
        if "mlx-cpu" in p["backends"]:
            assert "mlx" in p["exemplars"], p["id"]
    cpu = {p["id"] for p in load_patterns() if "mlx-cpu" in p["backends"]}
    assert {"mx_compile_fusion", "fused_expression", "chunked_scan_ops", "blocked_attention_ops"} <= cpu


def test_patterns_for_filters_and_orders() -> None:
    rows = patterns_for("scan", "mlx-cuda")
    ids = [p["id"] for p in rows]
    assert "warp_level_scan" in ids and "online_softmax" not in ids
    ratings = [p["prior"]["rating_0_to_10"] for p in rows]
    assert ratings == sorted(ratings, reverse=True)
    assert {p["id"] for p in patterns_for("attention", "mlx-cpu")} >= {"blocked_attention_ops"}
    assert all("mlx-cpu" in p["backends"] for p in patterns_for("reduction", "mlx-cpu"))


def test_hardware_covers_the_required_devices_and_profiles_match() -> None:
    ids = {p["id"] for p in load_hardware()}
    for chip in ("m1", "m2", "m3", "m4"):
        for size in ("", "-pro", "-max", "-ultra"):
            assert f"apple-{chip}{size}" in ids
    assert {"nvidia-a100", "nvidia-h100", "nvidia-h200", "nvidia-l4", "nvidia-rtx-4090"} <= ids
    cases = {"NVIDIA H200": "nvidia-h200", "NVIDIA H100 80GB HBM3": "nvidia-h100", "NVIDIA L4": "nvidia-l4",
             "NVIDIA L40S": "nvidia-l40s", "NVIDIA A100-SXM4-80GB": "nvidia-a100",
             "NVIDIA GeForce RTX 4090": "nvidia-rtx-4090"}
    apple = {"Apple M3 Max": "apple-m3-max", "Apple M1": "apple-m1", "Apple M2 Ultra": "apple-m2-ultra",
             "Apple M4 Pro": "apple-m4-pro"}
    for family, table in (("cuda", cases), ("metal", apple)):
        for name, pid in table.items():
            prof = match_profile(name, family)
            assert prof is not None and prof["id"] == pid, name


def test_apple_limits_are_the_documented_ones() -> None:
    for p in load_hardware():
        if p["vendor"] == "apple":
            assert p["shared_memory_kb"] == {"default": 32, "max_opt_in": 32}
            assert p["max_threads_per_group"] == 1024
        else:
            assert p["shared_memory_kb"]["default"] == 48


def test_knowledge_imports_without_jsonschema() -> None:
    # The GPU machine's Python has no jsonschema: the layer must not need it outside tests.
    import subprocess
    import sys

    code = ("import sys; sys.modules['jsonschema'] = None\n"
            "import ksearch.knowledge, ksearch.knowledge.lint, ksearch.knowledge.spec, ksearch.knowledge.analyzer\n"
            "ksearch.knowledge.load_patterns()\n")
    assert subprocess.run([sys.executable, "-c", code], capture_output=True).returncode == 0
