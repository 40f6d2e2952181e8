"""`ksearch bench attention --configs`: wgmma configurations (and, on a Mac, Metal kernels) timed beside the dispatch
in the same rounds."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from ksearch.bench import attention as ba

KS = [sys.executable, "-m", "ksearch.cli"]


def _row(speedup: float, configs: dict[str, tuple[str, float]], d: int = 128, causal: bool = False,
         length: int = 2048) -> dict[str, Any]:
    return {"D": d, "causal": causal, "L": length, "speedup": speedup,
            "configs": {name: {"kernel": kernel, "speedup": s} for name, (kernel, s) in configs.items()}}


def test_summary_reports_each_configuration_where_it_ran_and_the_best_per_shape() -> None:
    rows = [_row(0.5, {"a": ("a", 0.8), "b": ("b", 0.4)}),
            _row(0.9, {"a": ("a", 0.6), "b": ("native", 2.0)})]  # b does not fit the second shape: native ran
    summary = ba.summarize_prefill(rows)
    assert summary["configs"]["a"] == {"geomean_speedup": pytest.approx((0.8 * 0.6) ** 0.5), "shapes": 2}
    assert summary["configs"]["b"] == {"geomean_speedup": pytest.approx(0.4), "shapes": 1}
    # best per shape: 0.8 (a) and 0.9 (the dispatch); b's native fallback never counts as a win
    assert summary["geomean_speedup_best_of"] == pytest.approx((0.8 * 0.9) ** 0.5)
    assert "configs" not in ba.summarize_prefill([{"D": 64, "causal": True, "L": 2048, "speedup": 1.0}])


def test_summary_reads_the_dispatch_and_each_configuration_group_by_group() -> None:
    rows = [_row(0.9, {"a": ("a", 0.95)}, d=128, causal=True, length=4096),
            _row(0.8, {"a": ("a", 1.0)}, d=128, causal=True, length=8192),
            _row(0.7, {"a": ("native", 1.0)}, d=64, causal=False, length=2048),  # a does not fit: left out
            _row(1.1, {"a": ("a", 0.5)}, d=128, causal=False, length=4096)]
    summary = ba.summarize_prefill(rows)
    groups = summary["by_group"]
    assert list(groups) == ["D=64, no mask, L < 4096", "D=128, no mask, L >= 4096", "D=128, mask, L >= 4096"]
    assert groups["D=128, mask, L >= 4096"] == {"shapes": 2, "dispatch": pytest.approx((0.9 * 0.8) ** 0.5),
                                                "a": pytest.approx(0.95 ** 0.5)}
    assert groups["D=64, no mask, L < 4096"] == {"shapes": 1, "dispatch": pytest.approx(0.7), "a": None}
    # the D=128, L >= 4096 target's geomean over its own shapes; without configurations a group has the dispatch only
    assert summary["geomean_speedup_D128_L_ge_4096"] == pytest.approx((0.9 * 0.8 * 1.1) ** (1 / 3))
    plain = ba.summarize_prefill([{"D": 64, "causal": False, "L": 2048, "speedup": 0.5}])
    assert plain["by_group"] == {"D=64, no mask, L < 4096": {"shapes": 1, "dispatch": pytest.approx(0.5)}}
    assert plain["geomean_speedup_D128_L_ge_4096"] is None


def test_each_configuration_is_timed_in_the_same_rounds_and_checked_against_native() -> None:
    mx = pytest.importorskip("mlx.core")
    del mx
    shape = {"B": 1, "Hq": 4, "Hkv": 2, "D": 64, "L": 128, "S": 128, "dtype": "float16", "causal": True}
    row = ba.bench_prefill_shape(shape, rounds=2, n=1, configs=["ws3_n64_s4_p4_bulk", "ws2_n128_s3_p4_bulk"])
    assert set(row["configs"]) == {"ws3_n64_s4_p4_bulk", "ws2_n128_s3_p4_bulk"}
    for c in row["configs"].values():
        # off CUDA every configuration falls back to native, and the row says so rather than crediting the config
        assert c["kernel"] == "native" and c["latency_s"] > 0 and c["speedup_min"] <= c["speedup"] <= c["speedup_max"]
        assert c["max_abs_diff_vs_native"] == 0.0


def test_configurations_are_for_prefill_only(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="prefill"):
        ba.run_bench("decode", False, str(tmp_path), configs=["ws3_n64_s4_p4_bulk"])
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(("text", "said"), [("ws3_n64_s4_p4_bulk,ws3_n64_s3_p4_cb", "not a wgmma configuration"),
                                            ("ws3_n64_s4_p4_bulk, ws3_n64_s4_p4_bulk", "twice"),
                                            ("metal_fragments", "is a Metal kernel: time it on a Mac"),
                                            ("metal_nope", "no such Metal prefill kernel")])
def test_a_bad_configuration_list_is_one_line_before_anything_runs(tmp_path: Path, text: str, said: str) -> None:
    proc = subprocess.run([*KS, "bench", "attention", "--configs", text, "--out", str(tmp_path)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    assert said in proc.stderr and "Traceback" not in proc.stderr
    assert list(tmp_path.iterdir()) == []


def test_a_bad_metal_prefill_setting_is_one_line_before_anything_runs(tmp_path: Path) -> None:
    env = {**os.environ, "KSEARCH_METAL_PREFILL": "fragments"}
    proc = subprocess.run([*KS, "bench", "attention", "--out", str(tmp_path)], capture_output=True, text=True,
                          timeout=120, env=env)
    assert proc.returncode == 2 and "KSEARCH_METAL_PREFILL='fragments'" in proc.stderr
    assert "Traceback" not in proc.stderr and list(tmp_path.iterdir()) == []


def test_lengths_pick_the_shapes_at_those_lengths(tmp_path: Path) -> None:
    shapes = ba.prefill_lengths(ba.prefill_shapes(True), [2048])
    assert len(shapes) == 32 and {s["L"] for s in shapes} == {2048}
    assert ba.prefill_lengths(ba.prefill_shapes(True), []) == ba.prefill_shapes(True)
    # a subset without L >= 4096 has no figure there, not a zero
    summary = ba.summarize_prefill([_row(0.8, {}), _row(0.9, {}, d=64)])
    assert summary["geomean_speedup_L_ge_4096"] is None and summary["geomean_speedup_D128_L_ge_4096"] is None


def test_dtypes_pick_the_grid_at_those_dtypes() -> None:
    shapes = ba.prefill_shapes(True, ba.prefill_dtypes(["float32"]))
    assert len(shapes) == 48 and {s["dtype"] for s in shapes} == {"float32"}
    assert len(ba.prefill_shapes(False, ("float32",))) == 24  # B 1 only, as bfloat16 in the default subset
    assert ba.prefill_dtypes([]) == ba.PREFILL_DTYPES
    assert ba.prefill_shapes(True, ba.prefill_dtypes([])) == ba.prefill_shapes(True)
    assert len(ba.prefill_shapes(True, ba.prefill_dtypes(["float16", "float32", "float16"]))) == 96


@pytest.mark.parametrize(("text", "said"), [("1024", "length 1024 is not among the benchmark's (2048, 4096, 8192)"),
                                            ("2k", "write lengths as comma-separated integers")])
def test_a_bad_length_is_one_line_before_anything_runs(tmp_path: Path, text: str, said: str) -> None:
    proc = subprocess.run([*KS, "bench", "attention", "--lengths", text, "--out", str(tmp_path)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert said in " ".join(proc.stderr.split()) and "Traceback" not in proc.stderr
    assert list(tmp_path.iterdir()) == []


def test_a_bad_dtype_is_one_line_before_anything_runs(tmp_path: Path) -> None:
    proc = subprocess.run([*KS, "bench", "attention", "--dtypes", "float64", "--out", str(tmp_path)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, proc.stderr[-2000:]
    said = "dtype 'float64' is not one the benchmark takes: name one or more of float16, bfloat16, float32"
    assert said in " ".join(proc.stderr.split()) and "Traceback" not in proc.stderr
    assert list(tmp_path.iterdir()) == []
