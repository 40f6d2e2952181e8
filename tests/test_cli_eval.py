"""`ksearch eval` as a user runs it: one JSON object on stdout, exit codes, seeds, holdout, a user task file."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).parent
CANDIDATES = HERE / "candidates"
USER_TASK = HERE / "data" / "user_task.py"
ONE = ["--backend", "mlx-cpu", "--workloads", "cpu_256x1024_f32"]

GOOD_SCALED_ADD = """
import mlx.core as mx


def run(x, y, alpha):
    return (x.astype(mx.float32) + alpha * y.astype(mx.float32)).astype(x.dtype)
"""


def ksearch(*args: str, timeout: float = 180) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "ksearch.cli", *args], capture_output=True, text=True,
                          timeout=timeout, stdin=subprocess.DEVNULL)


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
    assert done.returncode == 0, done.stderr
    result = one_json_object(done.stdout)
    assert result["status"] == "wrong_answer"
    assert result["score"] == 0.0
    assert {"status", "score", "message", "workloads", "environment"} <= set(result)


def test_json_with_a_candidate_printing_on_its_stdout():
    done = ksearch("eval", "softmax", str(CANDIDATES / "forged_stdout.py"), *ONE, "--json")
    assert done.returncode == 0, done.stderr
    assert one_json_object(done.stdout)["status"] == "wrong_answer"


def test_exit_zero_whatever_the_status_and_table_output():
    done = ksearch("eval", "softmax", str(CANDIDATES / "exception.py"), *ONE)
    assert done.returncode == 0, done.stderr
    assert "runtime_error" in done.stdout


def test_a_message_with_brackets_is_printed_as_text(tmp_path):
    # rich reads "[/...]" as a closing tag: a candidate's message taken as markup crashed the table.
    bad = tmp_path / "bracketed.py"
    bad.write_text('def run(x):\n    raise ValueError("no file at [/tmp/cache] [bold]")\n')
    done = ksearch("eval", "softmax", str(bad), *ONE)
    assert done.returncode == 0, done.stderr
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
    plain = one_json_object(ksearch("eval", str(USER_TASK), str(cand), "--backend", "mlx-cpu", "--json").stdout)
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
