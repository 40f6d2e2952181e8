"""benchmarks/decode_power.py: reading nvidia-smi's samples, what a window of them says, and its one-line refusals."""

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from script_module import load_module

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks/decode_power.py"
decode_power = load_module(SCRIPT)


def test_a_sample_line_reads_as_watts_clock_and_reasons():
    assert decode_power.parse_sample("694.77, 1815, 0x0000000000000004\n", 12.5) == (12.5, 694.77, 1815.0, 4)
    # The driver writes "[N/A]" for a field it cannot read: that sample is left out, not a crash.
    assert decode_power.parse_sample("[N/A], 1815, 0x0000000000000000", 1.0) is None
    assert decode_power.parse_sample("garbage", 1.0) is None


def test_a_window_counts_only_its_own_samples_and_the_power_cap_bit():
    samples = [(0.5, 100.0, 1980.0, 0), (1.0, 690.0, 1800.0, 0x4), (1.5, 700.0, 1700.0, 0x4 | 0x1),
               (2.0, 650.0, 1900.0, 0), (3.5, 120.0, 1980.0, 0x4)]
    stats = decode_power.window_stats(samples, 1.0, 2.0)
    assert stats["samples"] == 3
    assert stats["power_w_median"] == 690.0 and stats["power_w_max"] == 700.0
    assert stats["sm_mhz_median"] == 1800.0
    assert stats["power_capped_share"] == pytest.approx(2 / 3)
    assert decode_power.window_stats(samples, 10.0, 11.0) == {"samples": 0}


def test_shapes_read_as_batch_and_length():
    from ksearch.bench.attention import parse_batch_lengths

    assert parse_batch_lengths("16x16384,1x4096") == [(16, 16384), (1, 4096)]
    for bad in ("16by1024", "0x64", "16x"):
        with pytest.raises(ValueError, match="shape"):
            parse_batch_lengths(bad)


def _run(*args: str, path: str | None = None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PATH": path} if path is not None else None
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=300, env=env)


def test_bad_input_and_a_machine_without_nvidia_smi_are_refused_in_one_line(tmp_path):
    for args, want in ((["--shapes", "16by1024"], "BxLENGTH"), (["--configs", "nope=1"], "nope")):
        done = _run(str(tmp_path), *args)
        assert done.returncode == 1 and done.stderr.strip().startswith("decode_power: "), done.stderr
        assert want in done.stderr and len(done.stderr.strip().splitlines()) == 1
    done = _run(str(tmp_path), path=str(tmp_path))  # a PATH without nvidia-smi
    assert done.returncode == 1 and "nvidia-smi is not on the PATH" in done.stderr, done.stderr
    assert len(done.stderr.strip().splitlines()) == 1
    assert not list(tmp_path.iterdir())


def test_the_window_opens_after_the_warm_stream():
    # nvidia-smi's power.draw is an average over about a second: the window must not open as a contender starts.
    import mlx.core as mx

    stamps: list[float] = []

    def fn():
        stamps.append(time.time())
        return mx.array(0.0)

    per_call, start, end = decode_power.sustained(fn, 0.05, warm=0.2)
    assert stamps[0] <= start - 0.2 and start < end and per_call > 0
    before = [t for t in stamps if t < start]
    assert len(before) >= 20  # the first ten, then at least one warm round
    stamps.clear()
    decode_power.sustained(fn, 0.05, warm=0.0)  # no warm-up: the window opens after the first ten
    assert len(stamps) >= 20


def test_a_window_or_warm_up_out_of_range_is_refused_in_one_line(tmp_path):
    for args in (["--seconds", "0"], ["--warm", "-1"]):
        done = _run(str(tmp_path), *args)
        assert done.returncode == 1 and done.stderr.strip().startswith("decode_power: --seconds"), done.stderr
        assert len(done.stderr.strip().splitlines()) == 1
    assert not list(tmp_path.iterdir())
