"""`ksearch spec`, `ksearch port`, `ksearch lint`: output and exit codes (0 ok, 1 lint errors, 2 bad input)."""

from __future__ import annotations

import json
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


def test_lint_deep_flag_runs() -> None:
    res = _run("lint", str(STARTERS / "rmsnorm_metal.py"), "--backend", "mlx-metal", "--deep")
    assert res.exit_code == 0, res.output
