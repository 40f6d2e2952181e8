"""Decode configurations named on the command line (`attention_gpu.py versus-native`, `ksearch bench decode
--config`); the timing itself needs the GPU (`bash benchmarks/gpu_suite.sh decode-versus-native`)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[1]


def test_a_configuration_is_named_by_its_fields():
    from ksearch.kernels.decode.cuda_split_k import DecodeConfig

    cfg = DecodeConfig.parse("warps=8,unroll=2,fused=1,prefetch=0")
    assert cfg == DecodeConfig(warps=8, unroll=2, fused=True, prefetch=False)
    assert DecodeConfig.parse("") == DecodeConfig()
    with pytest.raises(ValueError, match="unroll='x': give an integer"):
        DecodeConfig.parse("unroll=x")


def test_an_unknown_field_is_refused_with_the_fields_there_are():
    out = subprocess.run([sys.executable, str(ROOT / "benchmarks/attention_gpu.py"), "versus-native", "/tmp/unused",
                          "warp=8"], capture_output=True, text=True, timeout=120)
    assert out.returncode != 0
    assert "unknown DecodeConfig field 'warp'" in out.stderr and "warps" in out.stderr


def test_the_tensor_core_kernel_is_named_mma_and_parsed_as_a_cluster_config():
    from ksearch.kernels.decode.cuda_cluster import ClusterConfig

    assert ClusterConfig.parse("cluster=0,consumers=4,producers=2") == ClusterConfig(consumers=4, producers=2,
                                                                                      cluster=False)
    assert ClusterConfig.parse_mma_split("cluster=1,consumers=4") == ClusterConfig(consumers=4, cluster=False)
    out = subprocess.run([sys.executable, str(ROOT / "benchmarks/attention_gpu.py"), "versus-native", "/tmp/unused",
                          "--queued", "mma:consumer=4"], capture_output=True, text=True, timeout=120)
    assert out.returncode != 0
    assert "unknown ClusterConfig field 'consumer'" in out.stderr and "consumers" in out.stderr


def test_chained_calls_are_for_queued_rounds():
    out = subprocess.run([sys.executable, str(ROOT / "benchmarks/attention_gpu.py"), "versus-native", "/tmp/unused",
                          "--chained"], capture_output=True, text=True, timeout=120)
    assert out.returncode != 0 and "--chained is for --queued rounds" in out.stderr


@pytest.mark.parametrize("args,message", [
    (["--kernel", "mma_split", "--config", "keys=24x"], "keys='24x': give an integer"),
    (["--kernel", "mma_split", "--config", "warps=2"], "unknown ClusterConfig field 'warps'"),
    (["--config", "consumers=2"], "unknown DecodeConfig field 'consumers'"),
    (["--calls", "together"], "'together': use chained or independent"),
    (["--no-stream", "--calls", "together"], "'together': use chained or independent"),  # the stream's flag is read
])
def test_bench_decode_refuses_a_bad_kernel_or_configuration_in_one_line(args, message, tmp_path):
    out = subprocess.run([sys.executable, "-m", "ksearch.cli", "bench", "decode", "--out", str(tmp_path), *args],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 2, out.stderr[-2000:]
    assert message in " ".join(out.stderr.split()), out.stderr[-2000:]
    assert "Traceback" not in out.stderr and not list(tmp_path.iterdir())


def test_chained_calls_take_the_previous_output_as_their_query_and_read_the_caches_in_turn():
    from ksearch.bench.attention import chained

    seen = []

    def call(q, k, v):
        seen.append((q, k, v))
        return q + 1

    fn = chained(call, 10, [("k0", "v0"), ("k1", "v1"), ("k2", "v2")])
    assert [fn() for _ in range(4)] == [11, 12, 13, 14]
    assert seen == [(10, "k0", "v0"), (11, "k1", "v1"), (12, "k2", "v2"), (13, "k0", "v0")]


def test_a_chained_stream_rotates_small_caches_up_to_256_mib_and_keeps_a_big_one_alone():
    mx = pytest.importorskip("mlx.core")
    from ksearch.bench.attention import ROTATE_BYTES, decode_caches, decode_inputs

    small = {"B": 1, "Hq": 4, "Hkv": 1, "D": 64, "capacity": 2**16, "dtype": "float16"}  # 8 MiB each of K and V
    q, kc, vc = decode_inputs(small)
    caches = decode_caches(small, kc, vc)
    assert len(caches) == ROTATE_BYTES // (2 * kc.nbytes) == 16 and caches[0] == (kc, vc)
    assert not mx.array_equal(caches[1][0], kc).item()  # each cache its own contents
    big = {**small, "capacity": 2**20}  # 128 MiB each
    q, kc, vc = decode_inputs(big)
    assert decode_caches(big, kc, vc) == [(kc, vc)]


def test_the_decode_summary_counts_bandwidth_over_256_mib_only():
    from ksearch.bench.attention import summarize_decode

    rows = [{"speedup": 1.0, "kv_bytes": 2**28, "roofline_fraction": 0.4, "gbs": 1800.0},
            {"speedup": 1.0, "kv_bytes": 2**29, "roofline_fraction": 0.8, "gbs": 3900.0}]
    assert summarize_decode(rows)["min_tbs_kv_over_256MB"] == pytest.approx(3.9)
    assert "stream_min_tbs_kv_over_256MB" not in summarize_decode(rows)  # no stream timed: no stream figures
    streamed = [{**r, "stream_speedup": s, "stream_gbs": g, "native_stream_gbs": n}
                for r, s, g, n in zip(rows, (0.5, 2.0), (2000.0, 4300.0), (1900.0, 4100.0), strict=True)]
    summary = summarize_decode(streamed)
    assert summary["stream_min_tbs_kv_over_256MB"] == pytest.approx(4.3)  # only the row over 256 MiB counts
    assert summary["stream_native_min_tbs_kv_over_256MB"] == pytest.approx(4.1)
    assert summary["stream_geomean_speedup"] == pytest.approx(1.0) and summary["stream_min_speedup"] == 0.5
    assert summary["min_tbs_kv_over_256MB"] == pytest.approx(3.9)  # the queued rounds' figures as before


@pytest.mark.parametrize("calls", ["chained", "independent"])
def test_a_decode_row_times_the_stream_beside_the_queued_rounds(calls: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Off CUDA the library's decode is MLX's attention: the row is made all the same, its stream figures beside the
    rounds', from the same contenders."""
    pytest.importorskip("mlx.core")
    from ksearch.bench import attention as ba

    monkeypatch.setattr(ba, "STREAM_CALLS", 4)
    shape = {"B": 1, "Hq": 4, "Hkv": 2, "D": 64, "length": 300, "capacity": 320, "dtype": "float16"}
    row = ba.bench_decode_shape(shape, rounds=2, n=2, calls=calls, stream=True)
    assert row["stream_latency_s"] > 0 and row["native_stream_latency_s"] > 0
    assert row["native_stream_variant"] in ("native_slice", "native_contiguous")
    assert row["stream_speedup_min"] <= row["stream_speedup"] <= row["stream_speedup_max"]
    assert row["stream_gbs"] == pytest.approx(row["kv_bytes"] / row["stream_latency_s"] / 1e9)
    assert "stream_speedup" not in ba.bench_decode_shape(shape, rounds=2, n=2, calls=calls)


def test_the_stream_is_for_decode_only(tmp_path) -> None:
    from ksearch.bench.attention import run_bench

    with pytest.raises(ValueError, match="the stream of calls is decode's"):
        run_bench("prefill", False, str(tmp_path), stream=True)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.skipif(__import__("ksearch.backends.nvcc", fromlist=["nvcc_path"]).nvcc_path() is None,
                    reason="nvcc not installed")
def test_min_blocks_caps_the_split_kernels_registers_through_launch_bounds():
    import re

    from ksearch.backends.nvcc import compile_check, wrap
    from ksearch.kernels.decode import cuda_split_k as sk

    unit = wrap("bounded", sk.SPLIT_SOURCE, sk.launch_bounds(128, 4), [("q", "T"), ("k", "T"), ("v", "T")],
                [("part_acc", "float32"), ("part_ml", "float32")],
                [("T", "float16"), ("D", 128), ("G", 4), ("NW", 4), ("U", 4), ("PREFETCH", False)])
    ok, log = compile_check([sk.HEADER, unit])
    assert ok, log[-2000:]
    (regs,) = [int(r) for r in re.findall(r"Used (\d+) registers", log)]
    assert regs <= 128  # 65,536 registers / (4 blocks x 128 threads); ptxas's own choice is 142 without bounds
