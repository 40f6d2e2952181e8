"""`ksearch export`: the standalone module passes `ksearch eval`; the FlashInfer-Trace files follow that schema."""

from __future__ import annotations

import ast
import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from test_report_fakerun import BEST, make_fake_run
from typer.testing import CliRunner

from ksearch.cli import app

FIB_STATUSES = {"PASSED", "INCORRECT_SHAPE", "INCORRECT_NUMERICAL", "INCORRECT_DTYPE", "RUNTIME_ERROR",
                "COMPILE_ERROR", "TIMEOUT"}


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_fake_run(tmp_path_factory.mktemp("runs"))


def export(*args: str) -> str:
    r = CliRunner().invoke(app, ["export", *args], env={"COLUMNS": "200"})
    assert r.exit_code == 0, r.output
    return r.output


def test_module_has_provenance_and_the_source(run_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "kernel.py"
    export(str(run_dir), "--out", str(out))
    text = out.read_text()
    header = text[: text.index(BEST)]
    for item in (run_dir.name, "softmax", "mlx-cpu", "c0007", "1.3100", "'native'", "holdout:   1.250",
                 "ksearch 0.1.0", "exported:"):
        assert item in header, item
    assert all(line.startswith("#") or not line for line in header.splitlines())
    assert text.endswith(BEST)
    ast.parse(text)
    # A second export refuses to overwrite without --force.
    r = CliRunner().invoke(app, ["export", str(run_dir), "--out", str(out)])
    assert r.exit_code == 2 and "--force" in r.output
    export(str(run_dir), "--out", str(out), "--force")


def test_the_re_check_line_pastes_into_a_shell_as_it_is(run_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "my kernel é.py"
    export(str(run_dir), "--out", str(out))
    line = next(line for line in out.read_text().splitlines() if line.startswith("#   re-check:"))
    assert shlex.split(line.removeprefix("#   re-check:")) == ["ksearch", "eval", "softmax", out.name, "--backend",
                                                               "mlx-cpu"], line


@pytest.mark.parametrize("status", ["stopped", "finished"])
def test_a_run_that_did_not_finish_is_exported_with_a_warning(tmp_path: Path, status: str) -> None:
    run = make_fake_run(tmp_path / "runs", status=status)
    warning = f"warning: run {run.name} did not finish (stopped): c0007 is its best so far, not judged on the holdout"
    for fmt, out in (("module", tmp_path / "k.py"), ("flashinfer-trace", tmp_path / "fib")):
        res = subprocess.run([sys.executable, "-m", "ksearch.cli", "export", str(run), "--format", fmt, "--out",
                              str(out)], capture_output=True, text=True, timeout=120,
                             env={**os.environ, "COLUMNS": "80"})
        assert res.returncode == 0 and out.exists(), res.stderr  # exported all the same
        # one line, however narrow the terminal
        assert res.stderr.strip() == ("" if status == "finished" else warning), res.stderr


def test_exported_module_passes_ksearch_eval(run_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "exported.py"
    export(str(run_dir), "--out", str(out))
    proc = subprocess.run(
        [sys.executable, "-m", "ksearch.cli", "eval", "softmax", str(out), "--backend", "mlx-cpu", "--json"],
        capture_output=True, text=True, timeout=280,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["status"] == "passed", result["message"]
    assert result["score"] > 0


def test_flashinfer_trace(run_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "fib"
    export(str(run_dir), "--format", "flashinfer-trace", "--out", str(out))
    defs = {p.stem: json.loads(p.read_text()) for p in (out / "definitions").rglob("*.json")}
    assert set(defs) == {"softmax_float32", "softmax_float16"}
    d = defs["softmax_float32"]
    assert {"name", "op_type", "axes", "inputs", "outputs", "reference"} <= set(d)
    assert d["axes"] == {"rows": {"type": "var"}, "cols": {"type": "var"}}
    assert d["inputs"]["x"] == {"shape": ["rows", "cols"], "dtype": "float32"}
    assert defs["softmax_float16"]["outputs"]["out"]["dtype"] == "float16"

    sols = [json.loads(p.read_text()) for p in (out / "solutions").rglob("*.json")]
    assert len(sols) == 2
    for s in sols:
        assert s["definition"] in defs and s["author"] == "ksearch"
        spec = s["spec"]
        assert spec["language"] == "python" and spec["entry_point"] == "main.py::run"
        assert spec["destination_passing_style"] is False and spec["target_hardware"] == ["AMD_EPYC"]
        assert [f["path"] for f in s["sources"]] == ["main.py"]
        ast.parse(s["sources"][0]["content"])

    workloads = [json.loads(line) for p in (out / "workloads").rglob("*.jsonl") for line in p.read_text().splitlines()]
    traces = [json.loads(line) for p in (out / "traces").rglob("*.jsonl") for line in p.read_text().splitlines()]
    assert all(w["solution"] is None and w["evaluation"] is None for w in workloads)
    sol_names = {s["name"] for s in sols}
    # The three search workloads and the holdout one, each linked to a workload entry by uuid.
    assert len(traces) == 4
    uuids = {w["workload"]["uuid"] for w in workloads}
    for t in traces:
        assert t["definition"] in defs and t["solution"] in sol_names
        assert t["workload"]["uuid"] in uuids and t["workload"]["inputs"] == {"x": {"type": "random"}}
        ev = t["evaluation"]
        assert ev["status"] in FIB_STATUSES and ev["status"] == "PASSED"
        assert ev["performance"]["speedup_factor"] == pytest.approx(
            ev["performance"]["reference_latency_ms"] / ev["performance"]["latency_ms"])
        assert ev["environment"]["hardware"] == "AMD_EPYC" and ev["environment"]["libs"]["mlx"] == "0.32.4"
        assert ev["timestamp"].endswith("Z")


def test_flashinfer_reference_runs(run_dir: Path, tmp_path: Path) -> None:
    """The Definition's reference (MLX, not PyTorch) is executable and agrees with the exported solution."""
    mx = pytest.importorskip("mlx.core")
    out = tmp_path / "fib"
    export(str(run_dir), "--format", "flashinfer-trace", "--out", str(out))
    d = json.loads(next((out / "definitions").rglob("softmax_float32.json")).read_text())
    sol = json.loads(next((out / "solutions").rglob("softmax_float32_*.json")).read_text())
    ref_ns: dict[str, object] = {}
    exec(compile(d["reference"], "reference.py", "exec"), ref_ns)  # our own generated code
    sol_ns: dict[str, object] = {}
    exec(compile(sol["sources"][0]["content"], "main.py", "exec"), sol_ns)
    x = mx.random.normal((4, 33))
    want = ref_ns["run"](x)  # type: ignore[operator]
    got = sol_ns["run"](x)  # type: ignore[operator]
    assert mx.allclose(want, got, atol=1e-5).item()


def test_nothing_to_export(tmp_path: Path) -> None:
    from ksearch.store import RunStore

    store = RunStore(tmp_path / "empty", create=True)
    store.set_meta("task", "softmax")
    store.close()
    r = CliRunner().invoke(app, ["export", str(tmp_path / "empty"), "--out", str(tmp_path / "k.py")])
    assert r.exit_code == 2 and "no passing candidate" in r.output


def test_references_are_self_contained() -> None:
    """Each built-in task's Definition reference carries the helpers and constants its function uses."""
    from ksearch.report.export import _free_names, definitions
    from ksearch.tasks import all_tasks

    for task in all_tasks():
        for d in definitions(task).values():
            assert _free_names(d["reference"]) == set(), (task.name, _free_names(d["reference"]))
            compile(d["reference"], f"{d['name']}.py", "exec")
