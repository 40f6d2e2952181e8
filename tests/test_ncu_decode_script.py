"""benchmarks/ncu_decode.py: the calls it makes for Nsight Compute, and its one-line refusals."""

import subprocess
import sys
from pathlib import Path

SCRIPT = str(Path(__file__).resolve().parents[1] / "benchmarks/ncu_decode.py")


def test_every_contender_is_called_at_every_shape_in_the_order_printed():
    done = subprocess.run([sys.executable, SCRIPT, "--shapes", "1x64,2x32", "--configs", "min_chunk=1024", "warps=2"],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    marks = [line.split(maxsplit=3)[1:] for line in done.stdout.splitlines() if line.startswith("MARK")]
    assert [m[:2] for m in marks] == [["1", "64"]] * 4 + [["2", "32"]] * 4
    assert [m[2].split("(")[0] for m in marks[:4]] == ["native", "default", "DecodeConfig", "DecodeConfig"]
    assert "min_chunk=1024" in marks[2][2] and "warps=2" in marks[3][2]


def test_bad_shapes_and_configurations_are_refused_in_one_line():
    for args in (["--shapes", "16by1024"], ["--configs", "nope=1"]):
        done = subprocess.run([sys.executable, SCRIPT, *args], capture_output=True, text=True, timeout=300)
        assert done.returncode == 1 and done.stderr.strip().startswith("ncu_decode: "), done.stderr
        assert len(done.stderr.strip().splitlines()) == 1
