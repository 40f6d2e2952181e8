"""`ksearch eval` as a user runs it: one JSON object on stdout, exit codes (0 passed, 1 any other verdict, 2 bad
input), the verdict's table and message, seeds, holdout, a user task file."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from rich.console import Console

from ksearch.harness.result import EvalResult, WorkloadResult
from ksearch.report.tables import eval_table

HERE = Path(__file__).parent
CANDIDATES = HERE / "candidates"
USER_TASK = HERE / "data" / "user_task.py"
ONE = ["--backend", "mlx-cpu", "--workloads", "cpu_256x1024_f32"]

GOOD_SCALED_ADD = """
import mlx.core as mx


def run(x, y, alpha):
    return (x.astype(mx.float32) + alpha * y.astype(mx.float32)).astype(x.dtype)
"""


def ksearch(*args: str, timeout: float = 180, columns: int | None = None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "COLUMNS": str(columns)} if columns else None
    return subprocess.run([sys.executable, "-m", "ksearch.cli", *args], capture_output=True, text=True,
                          timeout=timeout, stdin=subprocess.DEVNULL, env=env)


def one_json_object(stdout: str) -> dict:
    """stdout must be exactly one JSON object (and nothing else)."""
    decoder = json.JSONDecoder()
    text = stdout.strip()
    obj, end = decoder.raw_decode(text)
    assert text[end:].strip() == "", f"more than one JSON object on stdout: {stdout[:500]!r}"
    assert isinstance(obj, dict)
    return obj


def test_json_is_one_object_even_when_the_candidate_forges_one():
    # The candidate prints a forged verdict on its own stdout and writes one into ours through /proc/<ppid>/fd/1.
    done = ksearch("eval", "softmax", str(CANDIDATES / "forged_parent_stdout.py"), *ONE, "--json")
    assert done.returncode == 1, done.stderr
    result = one_json_object(done.stdout)
    assert result["status"] == "wrong_answer"
    assert result["score"] == 0.0
    assert {"status", "score", "message", "workloads", "environment"} <= set(result)


def test_json_with_a_candidate_printing_on_its_stdout():
    done = ksearch("eval", "softmax", str(CANDIDATES / "forged_stdout.py"), *ONE, "--json")
    assert done.returncode == 1, done.stderr
    assert one_json_object(done.stdout)["status"] == "wrong_answer"


@pytest.mark.parametrize(("candidate", "status"), [
    ("exception.py", "runtime_error"), ("syntax_error.py", "compile_error"), ("forbidden_direct.py", "forbidden"),
])
def test_a_candidate_that_does_not_pass_exits_1(candidate, status):
    done = ksearch("eval", "softmax", str(CANDIDATES / candidate), *ONE, "--json")
    assert done.returncode == 1, done.stderr
    assert one_json_object(done.stdout)["status"] == status


def test_the_message_prints_whole_below_the_table():
    # As the table's caption it wrapped at the table's width: two narrow columns where nothing was timed.
    done = ksearch("eval", "softmax", str(CANDIDATES / "exception.py"), *ONE, columns=200)
    assert done.returncode == 1, done.stderr
    lines = done.stdout.splitlines()
    assert "runtime_error" in lines[0]
    assert "cpu_256x1024_f32: run() raised:" in lines
    assert "ValueError: candidate blew up on purpose" in lines


@pytest.mark.parametrize(("source", "message"), [
    (b"", "the candidate defines no top-level run(**inputs)"),
    ((CANDIDATES / "syntax_error.py").read_bytes(), "syntax error at line 5: expected ':'"),
    (b"def run(x):\n    return x\0\n", "the source contains a NUL byte (line 2); a candidate is Python text"),
], ids=["empty", "syntax_error", "nul_byte"])
def test_a_candidate_that_does_not_compile_has_its_verdict_and_message_and_no_table(tmp_path, source, message):
    # No workload has a figure: a table of bare workload names says nothing.
    cand = tmp_path / "cand.py"
    cand.write_bytes(source)
    done = ksearch("eval", "softmax", str(cand), *ONE, columns=200)
    assert done.returncode == 1, done.stderr
    lines = [ln for ln in done.stdout.splitlines() if ln.strip()]
    assert len(lines) == 2 and "compile_error" in lines[0] and lines[1] == message, done.stdout


def test_a_timeout_names_its_limit_as_given():
    done = ksearch("eval", "softmax", str(CANDIDATES / "infinite_loop.py"), *ONE, "--timeout", "0.5")
    assert done.returncode == 1, done.stderr
    assert "timeout" in done.stdout.splitlines()[0]
    assert "the candidate exceeded the 0.5s time limit" in done.stdout


def test_a_workload_not_judged_to_the_end_does_not_read_as_passed():
    done = ksearch("eval", "softmax", str(CANDIDATES / "infinite_loop.py"), *ONE, "--timeout", "0.5", "--json")
    assert done.returncode == 1, done.stderr
    result = one_json_object(done.stdout)
    assert result["status"] == "timeout" and [w["status"] for w in result["workloads"]] == ["timeout"]


def _rendered(result: EvalResult) -> str:
    console = Console(record=True, width=200)
    console.print(eval_table(result))
    return console.export_text()


@pytest.mark.parametrize("status", ["timeout", "runtime_error", "wrong_shape"])
def test_a_verdict_without_compared_outputs_shows_no_errors(status):
    # The trials that finished before the candidate timed out or crashed are no correctness check it passed.
    shown = _rendered(EvalResult(status=status, task="softmax", backend="mlx-cpu", baseline="native",
                                 workloads=[WorkloadResult("a", max_abs_err=0.0), WorkloadResult("b", max_abs_err=2e-4)],
                                 message="the candidate exceeded the 0.5s time limit"))
    assert "max err" not in shown and "e+00" not in shown and "e-04" not in shown


def test_a_nan_output_has_no_error_to_show():
    # An error of 0.00e+00 beside "NaN or Inf" would read as exact: the JSON has none (null), the table "-".
    done = ksearch("eval", "softmax", str(CANDIDATES / "nan_output.py"), *ONE, "--json")
    assert done.returncode == 1, done.stderr
    result = one_json_object(done.stdout)
    assert result["status"] == "wrong_answer" and "NaN or Inf" in result["message"]
    assert [(w["max_abs_err"], w["max_rel_err"]) for w in result["workloads"]] == [(None, None)]


def test_a_wrong_answer_shows_its_errors():
    shown = _rendered(EvalResult(status="wrong_answer", task="softmax", backend="mlx-cpu", baseline="native",
                                 workloads=[WorkloadResult("a", max_abs_err=0.0), WorkloadResult("b", max_abs_err=13.4)],
                                 message="b (seed 1): output out: values outside atol=0.0001 rtol=0.0001"))
    assert "max err" in shown and "1.34e+01" in shown


def test_holdout_workloads_alone_have_no_score():
    starter = HERE.parent / "src" / "ksearch" / "tasks" / "starters" / "softmax_cpu.py"
    args = ("eval", "softmax", str(starter), "--backend", "mlx-cpu", "--workloads", "cpu_100x3000_f32")
    done = ksearch(*args, "--json")
    assert done.returncode == 0, done.stderr
    result = one_json_object(done.stdout)
    assert result["status"] == "passed", result["message"]
    assert result["score"] is None and result["holdout_score"] > 0
    table = ksearch(*args, columns=200)
    assert table.returncode == 0, table.stderr
    verdict = table.stdout.splitlines()[0]
    assert "passed  score -  holdout " in verdict and "score 0" not in verdict


def test_a_message_with_brackets_is_printed_as_text(tmp_path):
    # rich reads "[/...]" as a closing tag: a candidate's message taken as markup crashed the table.
    bad = tmp_path / "bracketed.py"
    bad.write_text('def run(x):\n    raise ValueError("no file at [/tmp/cache] [bold]")\n')
    done = ksearch("eval", "softmax", str(bad), *ONE)
    assert done.returncode == 1, done.stderr
    assert "runtime_error" in done.stdout and "[/tmp/cache] [bold]" in done.stdout.replace("\n", "")


def test_seed_reproduces_the_seeds_and_the_verdict():
    runs = [one_json_object(ksearch("eval", "softmax", str(CANDIDATES / "output_cache.py"), *ONE, "--seed", "12345",
                                    "--json").stdout) for _ in range(2)]
    other = one_json_object(ksearch("eval", "softmax", str(CANDIDATES / "output_cache.py"), *ONE, "--seed", "777",
                                    "--json").stdout)
    assert runs[0]["seeds"] == runs[1]["seeds"]
    assert runs[0]["seeds"]["master"] == [12345]
    assert runs[0]["status"] == runs[1]["status"] == "wrong_answer"
    # the failing trial names its seed: the same one both times
    assert runs[0]["message"].split("):")[0] == runs[1]["message"].split("):")[0]
    assert other["seeds"] != runs[0]["seeds"]


def test_user_task_file_with_holdout(tmp_path):
    cand = tmp_path / "cand.py"
    cand.write_text(GOOD_SCALED_ADD)
    done = ksearch("eval", str(USER_TASK), str(cand), "--backend", "mlx-cpu", "--json")
    assert done.returncode == 0, done.stderr
    plain = one_json_object(done.stdout)
    assert plain["status"] == "passed", plain["message"]
    assert plain["task"] == "scaled_add"
    assert plain["score"] > 0
    assert plain["holdout_score"] is None
    assert all(w["split"] == "search" for w in plain["workloads"])

    held = one_json_object(ksearch("eval", str(USER_TASK), str(cand), "--backend", "mlx-cpu", "--holdout",
                                   "--json").stdout)
    assert held["status"] == "passed", held["message"]
    splits = [w["split"] for w in held["workloads"]]
    assert splits.count("holdout") == 1 and splits.count("search") == 2
    assert held["holdout_score"] is not None and held["holdout_score"] > 0


@pytest.mark.parametrize(("args", "needle"), [
    (["eval", "no_such_task", str(CANDIDATES / "exception.py")], "unknown task"),
    (["eval", "softmax", str(CANDIDATES / "exception.py"), "--backend", "mlx-nope"], "unknown backend"),
    (["eval", "softmax", str(CANDIDATES / "does_not_exist.py")], "does not exist"),
    (["eval", str(HERE / "data" / "no_such_task.py"), str(CANDIDATES / "exception.py")], "does not exist"),
    (["eval", "softmax", str(CANDIDATES / "exception.py"), "--workloads", "cpu_nope"], "no workload"),
    (["eval", "softmax", str(CANDIDATES / "exception.py"), "--baseline", "nope"], "no baseline"),
    (["eval", "softmax", str(CANDIDATES / "exception.py"), "--timeout", "-1"], "--timeout"),
    (["eval", "softmax", str(CANDIDATES / "exception.py"), "--memory-limit-gb", "0"], "--memory-limit-gb"),
])
def test_user_errors_exit_2_with_one_line(args, needle):
    done = ksearch(*args, timeout=60)
    assert done.returncode == 2
    assert done.stdout == ""
    lines = [ln for ln in done.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, done.stderr
    assert needle in lines[0] and lines[0].startswith("error:")


@pytest.mark.parametrize("args", [
    ["eval", "softmax", str(CANDIDATES / "exception.py"), "--no-such-flag"],
    ["eval", "softmax", str(CANDIDATES / "exception.py"), "--timeout", "abc"],
    ["eval", "softmax"],
])
def test_bad_flags_exit_2(args):
    done = ksearch(*args, timeout=60)
    assert done.returncode == 2
    assert done.stdout == ""
    assert "Error" in done.stderr or "error" in done.stderr


def test_a_long_message_keeps_its_end_where_the_error_is():
    # A traceback's last line is the error; the table once kept the first 1500 characters (the harness's frames).
    frames = "".join(f'  File "/x/harness/worker.py", line {i}, in serve\n' for i in range(100))
    message = f"cpu_256x1024_f32: run() raised:\nTraceback (most recent call last):\n{frames}ValueError: the real cause"
    shown = _rendered(EvalResult(status="runtime_error", task="softmax", backend="mlx-cpu", baseline="native",
                                 message=message))
    assert "ValueError: the real cause" in shown and "cpu_256x1024_f32: run() raised:" in shown
