"""`ksearch spec`, `ksearch port`, `ksearch lint`: output and exit codes (0 ok, 1 lint errors, 2 bad input)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from ksearch.cli import app

ROOT = Path(__file__).parent.parent
STARTERS = ROOT / "src" / "ksearch" / "tasks" / "starters"
CUDA = Path(__file__).parent / "data" / "cuda"
runner = CliRunner()


def _run(*args: str):  # type: ignore[no-untyped-def]
    return runner.invoke(app, list(args))


@pytest.mark.parametrize("backend", ["mlx-cuda", "mlx-metal", "mlx-cpu"])
def test_spec_accepts_every_backend(backend: str) -> None:
    res = _run("spec", "softmax", "--backend", backend)
    assert res.exit_code == 0, res.output
    assert f"# Kernel spec: softmax on {backend}" in res.output


def test_spec_task_file_out_and_from_cuda(tmp_path: Path) -> None:
    task_file = tmp_path / "my_task.py"
    task_file.write_text((CUDA / "micro_tasks.py").read_text() + "\n\nTASK = make('rowsum')\n")
    out = tmp_path / "spec.md"
    res = _run("spec", str(task_file), "--backend", "mlx-metal", "--out", str(out),
               "--from-cuda", str(CUDA / "reduction.cu"))
    assert res.exit_code == 0, res.output
    assert "Porting context" in out.read_text()


@pytest.mark.parametrize("args", [("spec", "no_such_task"), ("spec", "softmax", "--backend", "cuda"),
                                  ("spec", "softmax", "--from-cuda", "/no/such.cu"),
                                  ("port", "/no/such.cu"), ("port", str(CUDA / "reduction.cu"), "--backend", "x"),
                                  ("lint", "/no/such.py"), ("lint", str(STARTERS / "softmax_cuda.py"), "--task", "nope"),
                                  ("lint", str(STARTERS / "softmax_cuda.py"), "--backend", "metal")])
def test_bad_input_exits_2(args: tuple[str, ...]) -> None:
    res = _run(*args)
    assert res.exit_code == 2, res.output


def test_port_prints_and_writes_json(tmp_path: Path) -> None:
    out = tmp_path / "port.json"
    res = _run("port", str(CUDA / "flash_attention.cu"), "--backend", "mlx-metal", "--out", str(out))
    assert res.exit_code == 0, res.output
    assert "WARNING" in res.output and "online_softmax" in res.output
    ctx = json.loads(out.read_text())
    assert "online_softmax" in ctx["patterns"] and ctx["file"].endswith("flash_attention.cu")
    res = _run("port", str(CUDA / "selective_scan.cu"), "--json")
    assert res.exit_code == 0 and json.loads(res.output)["kind_guess"] == "scan"


def test_lint_exit_codes(tmp_path: Path) -> None:
    good = STARTERS / "softmax_metal.py"
    assert _run("lint", str(good), "--backend", "mlx-metal", "--task", "softmax").exit_code == 0
    res = _run("lint", str(good), "--backend", "mlx-cuda")
    assert res.exit_code == 1 and "wrong-dialect" in res.output
    forbidden = tmp_path / "cand.py"
    forbidden.write_text("import mlx.core as mx\n\n\ndef run(x):\n    return mx.softmax(x, axis=-1)\n")
    res = _run("lint", str(forbidden), "--backend", "mlx-cpu", "--task", "softmax", "--json")
    assert res.exit_code == 1 and json.loads(res.output)[0]["code"] == "forbidden-api"
    assert _run("lint", str(forbidden), "--backend", "mlx-cpu").exit_code == 0


@pytest.mark.parametrize(("source", "code"), [("", "no-run"), ("def main(x):\n    return x\n", "no-run"),
                                            ("def run(y):\n    return y\n", "run-signature"),
                                            ("run = 5\n", "run-not-callable")])
def test_lint_refuses_a_run_the_harness_cannot_call(tmp_path: Path, source: str, code: str) -> None:
    cand = tmp_path / "cand.py"
    cand.write_text(source)
    res = _run("lint", str(cand), "--backend", "mlx-cpu", "--task", "softmax")
    assert res.exit_code == 1 and f"error [{code}]" in res.output, res.output
    assert "0 error(s)" not in res.output


def test_lint_deep_flag_runs() -> None:
    res = _run("lint", str(STARTERS / "rmsnorm_metal.py"), "--backend", "mlx-metal", "--deep")
    assert res.exit_code == 0, res.output


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    """The installed command as a user runs it: errors are one line on stderr."""
    return subprocess.run([sys.executable, "-m", "ksearch.cli", *args], capture_output=True, text=True, timeout=120)


def _one_error_line(res: subprocess.CompletedProcess[str]) -> str:
    assert res.returncode == 2, (res.stdout, res.stderr)
    lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and "Traceback" not in res.stderr, res.stderr
    return lines[0]


@pytest.mark.parametrize("command", [("spec", "softmax", "--backend", "mlx-cpu"),
                                     ("port", str(CUDA / "reduction.cu"), "--backend", "mlx-cpu")])
@pytest.mark.parametrize("where, says", [("{tmp}", "is a directory; name a file"),
                                         ("{tmp}/a-file/out", "is a file, not a directory"),
                                         ("/proc/ksearch-out", "is not writable")])
def test_an_out_that_cannot_be_written_is_one_line(command: tuple[str, ...], where: str, says: str,
                                                   tmp_path: Path) -> None:
    (tmp_path / "a-file").write_text("kept")
    line = _one_error_line(_cli(*command, "--out", where.format(tmp=tmp_path)))
    assert says in line and "--out" in line
    assert (tmp_path / "a-file").read_text() == "kept"


@pytest.mark.parametrize("command, out", [(("spec", "softmax", "--backend", "mlx-cpu"), "spec.md"),
                                          (("port", str(CUDA / "reduction.cu"), "--backend", "mlx-cpu"), "port.json")])
def test_an_out_in_a_missing_folder_makes_it(command: tuple[str, ...], out: str, tmp_path: Path) -> None:
    target = tmp_path / "new" / "deeper" / out
    res = _cli(*command, "--out", str(target))
    assert res.returncode == 0, res.stderr
    assert target.read_text()


def test_a_write_that_fails_after_the_check_is_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(self: Path, *args: object, **kwargs: object) -> int:
        raise PermissionError(13, "Permission denied", str(self))

    monkeypatch.setattr(Path, "write_text", refuse)
    res = _run("port", str(CUDA / "reduction.cu"), "--backend", "mlx-cpu", "--out", str(tmp_path / "port.json"))
    assert res.exit_code == 2 and "Traceback" not in res.output
    assert "cannot write" in res.output and "Permission denied" in res.output


@pytest.mark.parametrize("args", [("port", "{readme}"), ("port", "{tmp}/kernel.py"),
                                  ("spec", "softmax", "--from-cuda", "{readme}")])
def test_a_file_that_is_not_cuda_source_is_refused(args: tuple[str, ...], tmp_path: Path) -> None:
    (tmp_path / "kernel.py").write_text("__global__ void k() {}\n")
    res = _cli(*(a.format(readme=ROOT / "README.md", tmp=tmp_path) for a in args), "--backend", "mlx-cpu")
    assert "is not CUDA source: name a .cu, .cuh or .cuda file" in _one_error_line(res)


def test_a_directory_named_like_cuda_source_is_refused(tmp_path: Path) -> None:
    (tmp_path / "k.cu").mkdir()
    assert "is a directory" in _one_error_line(_cli("port", str(tmp_path / "k.cu"), "--backend", "mlx-cpu"))


def test_port_names_the_cuda_file_in_a_command_that_pastes_as_it_is(tmp_path: Path) -> None:
    import shlex

    cuda = tmp_path / "my kernels" / "reduction é.cu"
    cuda.parent.mkdir()
    cuda.write_text((CUDA / "reduction.cu").read_text())
    res = _run("port", str(cuda), "--backend", "mlx-cpu", "--out", str(tmp_path / "port.json"))
    assert res.exit_code == 0, res.output
    command = res.output.strip().splitlines()[-1].split("pass it to `")[1].rstrip("`")
    assert shlex.split(command) == ["ksearch", "run", "TASK", "--from-cuda", str(cuda)], res.output
