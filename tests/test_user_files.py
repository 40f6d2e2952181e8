"""A file a user names that cannot be read as text (bytes that are not UTF-8, no permission) is one line and exit 2
from every command that reads one, never a traceback, and a refused run leaves no run directory."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from ksearch.cli import app

KS = [sys.executable, "-m", "ksearch.cli"]
NOT_UTF8 = b"def run(x):\n    return x  # \xff\n"


def _one_error_line(res: subprocess.CompletedProcess[str]) -> str:
    assert res.returncode == 2, (res.stdout, res.stderr)
    assert res.stdout == "" and "Traceback" not in res.stderr, (res.stdout, res.stderr)
    lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, res.stderr
    return lines[0]


@pytest.mark.parametrize("args, key, what", [
    (("eval", "softmax", "{py}", "--backend", "mlx-cpu"), "py", "candidate file"),
    (("eval", "softmax", "{py}", "--backend", "mlx-cpu", "--json"), "py", "candidate file"),
    (("lint", "{py}", "--backend", "mlx-cpu"), "py", "candidate file"),
    (("port", "{cu}", "--backend", "mlx-cpu"), "cu", "CUDA file"),
    (("spec", "softmax", "--backend", "mlx-cpu", "--from-cuda", "{cu}"), "cu", "--from-cuda file"),
    (("run", "softmax", "--backend", "mlx-cpu", "--from-cuda", "{cu}", "--runs-dir", "{runs}"), "cu",
     "--from-cuda file"),
    (("run", "softmax", "--backend", "mlx-cpu", "--config", "{toml}", "--runs-dir", "{runs}"), "toml", "config file"),
])
def test_a_file_that_is_not_utf8_is_one_line(args: tuple[str, ...], key: str, what: str, tmp_path: Path) -> None:
    files = {"py": tmp_path / "cand.py", "cu": tmp_path / "kernel.cu", "toml": tmp_path / "run.toml"}
    for path in files.values():
        path.write_bytes(NOT_UTF8)
    runs = tmp_path / "runs"
    named = {k: str(v) for k, v in files.items()} | {"runs": str(runs)}
    res = subprocess.run([*KS, *(a.format(**named) for a in args)], capture_output=True, text=True, timeout=120)
    line = _one_error_line(res)
    assert line.startswith(f"error: cannot read {what} {named[key]}: "), line
    assert line.endswith(f"is not UTF-8 text (byte 0xff at offset {NOT_UTF8.index(0xFF)}); save it as UTF-8"), line
    assert not runs.exists(), "a refused run leaves no run directory"


def test_a_candidate_this_process_may_not_read_is_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cand = tmp_path / "cand.py"
    cand.write_text("def run(x):\n    return x\n")
    real = Path.read_text

    def refuse(self: Path, *args: object, **kwargs: object) -> str:
        if self == cand:
            raise PermissionError(13, "Permission denied", str(self))
        return real(self, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(Path, "read_text", refuse)  # as root, a mode of 000 reads all the same
    res = CliRunner().invoke(app, ["eval", "softmax", str(cand), "--backend", "mlx-cpu", "--json"])
    assert res.exit_code == 2 and "Traceback" not in res.output, res.output
    lines = [ln for ln in res.output.splitlines() if ln.strip()]
    assert lines == [f"error: cannot read candidate file {cand}: Permission denied"], res.output
