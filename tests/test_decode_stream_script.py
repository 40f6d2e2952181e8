"""benchmarks/decode_stream.py: the ways of driving a stream of calls, and its one-line refusals."""

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest
from script_module import load_module

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks/decode_stream.py"
decode_stream = load_module(SCRIPT)


def test_modes_read_as_kind_and_count():
    assert decode_stream.parse_modes("queued:10,async:2,steps:4,build:1") == [("queued", 10), ("async", 2),
                                                                               ("steps", 4), ("build", 1)]
    for bad in ("queued", "queued:0", "later:3", "async:x", ""):
        with pytest.raises(ValueError, match="mode"):
            decode_stream.parse_modes(bad)


@pytest.mark.parametrize("mode", [("queued", 1), ("queued", 10), ("async", 2), ("steps", 3), ("build", 5)])
def test_every_mode_calls_the_function_and_times_a_call(mode):
    mx = pytest.importorskip("mlx.core")
    a = mx.ones((32, 32))
    calls = []

    def fn():
        calls.append(1)
        return a @ a

    t = decode_stream.per_call(fn, mode, 0.02)
    assert 0 < t < 0.02 and len(calls) > mode[1]  # a warm pass, then whole bursts within the window


def test_async_keeps_at_most_n_calls_in_flight(monkeypatch):
    mx = pytest.importorskip("mlx.core")
    a = mx.ones((8, 8))
    made, waited = [], []
    real_eval = mx.eval

    def counting_eval(*args):
        waited.append(1)
        return real_eval(*args)

    monkeypatch.setattr(mx, "eval", counting_eval)
    decode_stream.per_call(lambda: made.append(1) or a + 1, ("async", 3), 0.01)
    # Every call past the first three in a burst waits for the oldest one; each burst ends with one wait for the rest.
    bursts = len(made) // 32
    assert len(waited) == bursts * (32 - 3 + 1)


def test_bad_input_and_a_machine_without_cuda_are_refused_in_one_line(tmp_path):
    for args, want in ((["--modes", "queued:0"], "MODE:N"), (["--shapes", "16by1024"], "BxLENGTH"),
                       (["--configs", "nope=1"], "nope"), (["--seconds", "0"], "positive"),
                       (["--timeline", "2", "--modes", "build:2"], "queued, async or steps"), (["--timeline", "-1"], "ROUNDS"),
                       (["--chained", "--pieces"], "drop --chained")):
        done = subprocess.run([sys.executable, str(SCRIPT), str(tmp_path), *args], capture_output=True, text=True,
                              timeout=300)
        assert done.returncode == 1 and done.stderr.strip().startswith("decode_stream: "), done.stderr
        assert want in done.stderr and len(done.stderr.strip().splitlines()) == 1
    done = subprocess.run([sys.executable, str(SCRIPT), str(tmp_path)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 1 and "no CUDA device" in done.stderr, done.stderr  # this machine: MLX on the CPU
    assert not list(tmp_path.iterdir())


def test_a_timeline_splits_a_call_into_kernels_and_idle_time():
    # Two calls: a 10 us kernel overlapping a 4 us one, 6 us idle, then a 10 us kernel; 20 us idle; the same again.
    kernels = [("split", 0.0, 10.0), ("merge", 8.0, 12.0), ("split", 18.0, 28.0),
               ("split", 48.0, 58.0), ("merge", 56.0, 60.0), ("split", 66.0, 76.0)]
    tl = decode_stream.summarize_timeline(kernels, 2)
    assert tl["span_us"] == 38.0 and tl["busy_us"] == 22.0 and tl["idle_us"] == 16.0
    assert tl["first"][:2] == [("split", 0.0, 10.0), ("merge", 8.0, 4.0)]
    assert list(tl["kernels"]) == ["split", "merge"]  # the most time first
    assert tl["kernels"]["split"] == {"per_call": 2.0, "median_us": 10.0}
    assert tl["kernels"]["merge"] == {"per_call": 1.0, "median_us": 4.0}
    with pytest.raises(ValueError, match="no kernels"):
        decode_stream.summarize_timeline([], 3)


@pytest.mark.skipif(importlib.util.find_spec("torch") is not None, reason="torch is installed here")
def test_a_timeline_without_torch_is_refused_in_one_line(tmp_path):
    done = subprocess.run([sys.executable, str(SCRIPT), str(tmp_path), "--timeline", "2"], capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 1 and "install torch" in done.stderr and len(done.stderr.strip().splitlines()) == 1
