"""benchmarks/decode_host_time.py (MLX-CUDA only; its figures come from the H200): on a machine without it, and with a
bad argument, it refuses in one line that says what to do."""

import subprocess
import sys
from pathlib import Path

SCRIPT = str(Path(__file__).resolve().parents[1] / "benchmarks/decode_host_time.py")


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, SCRIPT, *args], capture_output=True, text=True, timeout=120)


def test_bad_lengths_are_refused_in_one_line(tmp_path):
    done = _run(str(tmp_path), "--lengths", "4k")
    assert done.returncode != 0 and done.stderr.strip().splitlines()[-1].startswith("decode_host_time: --lengths")
    assert "give positive lengths as 4096,16384" in done.stderr
    assert "give positive lengths" in _run(str(tmp_path), "--lengths", "0").stderr


def test_without_cuda_it_says_where_to_run_it(tmp_path):
    import mlx.core as mx

    if mx.cuda.is_available():
        return  # on the CUDA machine the script runs (the GPU suite's measurement)
    done = _run(str(tmp_path))
    assert done.returncode != 0 and "run this on the CUDA machine" in done.stderr
    assert not list(tmp_path.iterdir())
