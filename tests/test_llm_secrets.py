"""Keys never leave the search process: taken out of the environment before any worker starts, and redacted by value
from everything a run stores, sends, shows or exports.

The end-to-end runs use `--api-key-env LLM_AUTH` (a name no denylist of KEY/TOKEN/SECRET would catch) against the
fake server, with a hostile model: its analysis echoes the key it was sent, and its first candidate hunts for the
key (its environment, every /proc/<pid>/environ it can read) and raises with what it found plus the echoed value.
That message is what would reach run.db and the next prompt. The same run is repeated as an unprivileged user
whose parent shell holds the key in its environment (a candidate can read that shell's /proc entry).
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path
from typing import Any

import pytest
from fake_llm_server import SOFTMAX_KERNELS, FakeLLMServer, KSearchScript, Reply, header
from typer.testing import CliRunner

from ksearch.cli import app
from ksearch.config import LLMConfig
from ksearch.errors import LLMConfigError
from ksearch.policy.llm import keys
from ksearch.policy.llm.presets import resolve
from ksearch.store import RunReader, RunStore
from ksearch.store.redact import MASK, Redactor, register

SECRET = "sk-llmauth-7f3c9a1e5b2d4c6a8e0f1b3d5a7c9e1f"
SRC = str(Path(__file__).resolve().parents[1] / "src")

HUNTER = '''import os

import mlx.core as mx

# The server echoed its credentials into this answer: ECHO


def _hunt():
    found = {"env": os.environ.get("LLM_AUTH"), "echo": "ECHO", "proc": []}
    try:
        with open(f"/proc/{os.getppid()}/environ", "rb") as f:
            f.read()
        found["parent"] = "readable"
    except OSError:
        found["parent"] = "denied"
    for entry in sorted(os.listdir("/proc")):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/environ", "rb") as f:
                data = f.read()
        except OSError:
            continue
        for var in data.split(b"\\0"):
            if var.startswith(b"LLM_AUTH=") and len(var) > len(b"LLM_AUTH="):
                found["proc"].append(var.decode(errors="replace"))
    return found


def run(x):
    found = _hunt()
    print("hunted:", found)
    raise RuntimeError(f"hunted: {found}")
'''.replace("ECHO", SECRET)


def script() -> KSearchScript:
    echo = Reply(f"## Classification\nreduction (row softmax). Your credentials: Bearer {SECRET}\n## Families\n1. fused")
    return KSearchScript([HUNTER, SOFTMAX_KERNELS["compiled"], SOFTMAX_KERNELS["exp2"]], faults=[("# Analysis", echo)])


def run_args(server: FakeLLMServer, runs: Path) -> list[str]:
    return ["run", "softmax", "--backend", "mlx-cpu", "--policy", "llm", "--base-url", server.url, "--api-key-env",
            "LLM_AUTH", "--budget", "3", "--baseline", "naive", "--runs-dir", str(runs), "--quiet"]


def invoke(*args: str) -> Any:
    result = CliRunner().invoke(app, list(args), env={"COLUMNS": "200"})
    if result.exception and not isinstance(result.exception, SystemExit):
        raise result.exception
    return result


def files_without_secret(root: Path) -> None:
    for path in root.rglob("*"):
        if path.is_file():
            assert SECRET.encode() not in path.read_bytes(), path


# -- taking the key -----------------------------------------------------------------------------------------------


def test_take_key_leaves_no_copy_in_any_environment_of_the_process() -> None:
    """In a process started with the key (so it sits in the start-up environment block, which /proc shows)."""
    probe = """
import json, os, subprocess, sys
from ksearch.policy.llm.keys import take_key
from ksearch.store.redact import SECRETS
value = take_key("LLM_AUTH")
child = subprocess.run([sys.executable, "-c", "import os; print(os.environ.get('LLM_AUTH'))"],
                       capture_output=True, text=True).stdout.strip()
import posix
print(json.dumps({"value": value, "os_environ": "LLM_AUTH" in os.environ, "getenv": os.getenv("LLM_AUTH"),
                  "posix": b"LLM_AUTH" in posix.environ, "child": child, "again": take_key("LLM_AUTH"),
                  "proc": open("/proc/self/environ", "rb").read().decode(errors="replace"),
                  "redacted": value in SECRETS}))
"""
    env = {**os.environ, "LLM_AUTH": SECRET, "PYTHONPATH": SRC}
    out = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    seen = json.loads(out.stdout)
    assert seen["value"] == SECRET and seen["again"] == SECRET  # read once, remembered for the process
    assert not seen["os_environ"] and seen["getenv"] is None and not seen["posix"]
    assert seen["child"] == "None"  # no child process inherits it
    if sys.platform.startswith("linux"):
        assert SECRET not in seen["proc"] and "LLM_AUTH=" in seen["proc"]  # the start-up block, overwritten
    assert seen["redacted"]


def test_a_mapping_is_read_not_changed_and_the_value_is_redacted() -> None:
    env = {"LLM_AUTH": SECRET}
    assert keys.take_key("LLM_AUTH", env) == SECRET and env == {"LLM_AUTH": SECRET}
    assert keys.take_key(None, env) is None and keys.take_key("UNSET_VAR", env) is None


def test_a_taken_key_still_resolves_in_the_same_process(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LLM_AUTH_TWICE", SECRET + "-2")
    assert keys.take_key("LLM_AUTH_TWICE") == SECRET + "-2"
    assert "LLM_AUTH_TWICE" not in os.environ
    # --resume in the same process (a notebook, a test) checks and reads the key again.
    resolve(LLMConfig(preset="openai", api_key_env="LLM_AUTH_TWICE"))
    assert keys.take_key("LLM_AUTH_TWICE") == SECRET + "-2"


def test_a_key_given_where_its_variable_name_belongs_is_refused_without_echoing_it() -> None:
    with pytest.raises(LLMConfigError) as info:
        resolve(LLMConfig(preset="openai", api_key_env=SECRET), environ={})
    assert SECRET not in str(info.value) and "names the environment variable" in str(info.value)


# -- redaction -------------------------------------------------------------------------------------------------------


def test_redactor_finds_the_value_raw_and_inside_json() -> None:
    r = Redactor([SECRET, "short"])  # too short to register: would corrupt ordinary text
    quoted = 'k"ey\\with-' + SECRET  # a value JSON escapes
    r.add(quoted)
    assert r.text(f"Bearer {SECRET}.") == f"Bearer {MASK}."
    assert r.text("a short text") == "a short text"
    assert r.json({"m": f"x {SECRET}", SECRET: [quoted]}) == {"m": f"x {MASK}", MASK: [MASK]}
    doc = json.dumps({"v": quoted})
    assert quoted not in json.loads(r.text(doc))["v"]
    assert r.json({"a": 1}) == {"a": 1}


def test_log_records_are_redacted(caplog: pytest.LogCaptureFixture) -> None:
    register(SECRET)
    log = logging.getLogger("ksearch.llm")
    with caplog.at_level(logging.INFO, logger="ksearch.llm"):
        log.warning("server said: %s", f"Bearer {SECRET}")
        try:
            raise RuntimeError(f"echo {SECRET}")
        except RuntimeError:
            log.exception("failed")
    assert SECRET not in caplog.text and MASK in caplog.text
    for rec in caplog.records:
        assert SECRET not in rec.getMessage() and SECRET not in (rec.exc_text or "")


def test_everything_the_store_writes_is_redacted(tmp_path: Path) -> None:
    from types import SimpleNamespace

    store = RunStore(tmp_path / "run", create=True, redactor=Redactor([SECRET]))
    with store.transaction():
        store.set_meta("config", {"llm": {"base_url": f"http://h/v1?key={SECRET}", "api_key_env": "LLM_AUTH"}})
        store.write_json("config.json", {"note": SECRET})
        row = store.add_candidate(f"# {SECRET}\ndef run(x):\n    return x\n", f"def run(x): {SECRET}", 0, "n1",
                                  None, f"title {SECRET}", "first", {"p": SECRET})
        store.add_evaluation(row.id, 1, 0, "search", {"status": "runtime_error", "message": f"boom {SECRET}",
                                                      "score": 0.0, "workloads": [{"log": SECRET}]})
        store.add_world_model(0, {"kernel_summary": SECRET}, "initial")
        store.add_call(0, SimpleNamespace(role="code", model="m", prompt=f"p {SECRET}", response=f"r {SECRET}",
                                          tokens_in=1, tokens_out=1, latency_s=0.1, cost_usd=0.0, retries=0,
                                          error=f"HTTP 500: Bearer {SECRET}"))
        store.add_event(0, "policy_error", {"message": SECRET})
        store.set_state("loop_state", {"analysis": f"{SECRET} " * 100, "policy": {"last_source": SECRET}})
        store.write_best(f"# {SECRET}\n")
    assert MASK in store.get_state("loop_state")["analysis"]
    store.close()
    files_without_secret(tmp_path)
    with RunReader(tmp_path / "run") as reader:
        assert reader.calls(texts=True)[0].error == f"HTTP 500: Bearer {MASK}"


# -- end to end --------------------------------------------------------------------------------------------------------


def check_run(run: Path, requests: list[dict[str, Any]], tmp: Path) -> str:
    """Nothing of the run, nothing sent to the server, nothing shown or exported holds the key. Returns the
    hunter's verdict message."""
    chats = [r for r in requests if r["path"].endswith("/chat/completions")]
    assert chats and all(header(r, "Authorization") == f"Bearer {SECRET}" for r in chats)  # the key was used
    for r in chats:
        assert SECRET not in json.dumps(r["body"])  # ... and never sent in a prompt
    prompts = [json.dumps(r["body"]) for r in chats]
    assert any("hunted:" in p for p in prompts)  # the hunter's message did reach the next prompt, redacted
    assert any(MASK in p and "Classification" in p for p in prompts)  # the echoed analysis too
    files_without_secret(run)
    with RunReader(run) as reader:
        evals = reader.evaluations("search")
        state = reader.meta().get("loop_state")
    hunted = next(e.message for e in evals if "hunted:" in (e.message or ""))
    assert state is not None and SECRET not in json.dumps(state)
    outs = [invoke("report", str(run)), invoke("report", str(run), "--calls"),
            invoke("report", str(run), "--calls", "--json"), invoke("report", str(run), "--evaluations", "--json"),
            invoke("report", str(run), "--html", str(tmp / "r.html")),
            invoke("export", str(run), "--format", "flashinfer-trace", "--out", str(tmp / "fi")),
            invoke("export", str(run), "--out", str(tmp / "kernel.py"))]
    for out in outs:
        assert out.exit_code == 0, out.output
        assert SECRET not in out.output
    files_without_secret(tmp / "fi")
    for f in (tmp / "r.html", tmp / "kernel.py"):
        assert SECRET.encode() not in f.read_bytes()
    calls = json.loads(outs[2].output)["calls"]
    assert any(MASK in c["response"] for c in calls if c["role"] == "analysis")
    return hunted


@pytest.mark.slow
def test_a_hostile_model_and_candidate_leave_no_key_anywhere(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LLM_AUTH", SECRET)
    monkeypatch.setenv("KSEARCH_LLM_BACKOFF_S", "0.01")
    runs = tmp_path / "runs"
    with FakeLLMServer(script()) as server:
        result = invoke(*run_args(server, runs))
        requests = list(server.requests)
    assert result.exit_code == 0, result.output
    assert SECRET not in result.output
    assert "LLM_AUTH" not in os.environ  # taken before the first worker started
    run = next(d for d in runs.iterdir() if (d / "run.db").is_file())
    hunted = check_run(run, requests, tmp_path)
    assert "'env': None" in hunted  # the worker's environment never had it
    assert MASK in hunted  # the echoed value the candidate raised with


NOBODY = ["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups"]


def nobody_python(work: Path) -> tuple[str, dict[str, str]] | None:
    """An interpreter the user nobody can start from a shell and import ksearch with, and its environment (this
    interpreter's packages on the path: a virtual environment under a directory nobody cannot enter is reached
    through another interpreter of the same version)."""
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(work), "KSEARCH_TEST": "1",
           "PYTHONPATH": os.pathsep.join([SRC, sysconfig.get_paths()["purelib"]])}
    probe = '"$0" -c "import mlx.core, openai, jinja2, typer, ksearch.cli"'
    version = f"python{sys.version_info.major}.{sys.version_info.minor}"
    system = [shutil.which(name, path="/usr/local/bin:/usr/bin:/bin") or "" for name in (version, "python3")]
    for exe in dict.fromkeys([sys.executable, os.path.realpath(sys.executable), *system]):
        if exe and subprocess.run([*NOBODY, "sh", "-c", probe, exe], env=env, capture_output=True, cwd=work,
                                  timeout=120).returncode == 0:
            return exe, env
    return None


@pytest.mark.slow
@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() != 0 or shutil.which("setpriv") is None,
                    reason="needs root and setpriv to run the search as the unprivileged user nobody")
@pytest.mark.parametrize("sandbox", ["on", "off"])
def test_as_an_unprivileged_user_a_key_found_in_the_parent_shell_goes_no_further(tmp_path: Path, sandbox: str) -> None:
    # Everything the run as `nobody` touches lives under a directory that user can write and traverse.
    work = Path(tempfile.mkdtemp(prefix="ksearch-nobody-", dir="/tmp"))
    try:
        work.chmod(0o777)
        found = nobody_python(work)
        if found is None:
            pytest.skip("no Python interpreter that the user nobody can run imports ksearch here")
        exe, env = found
        runs = work / "runs"
        with FakeLLMServer(script()) as server:
            env = {**env, "LLM_AUTH": SECRET, "KSEARCH_LLM_BACKOFF_S": "0.01"}
            if sandbox == "off":
                env["KSEARCH_SANDBOX"] = "off"
            # `; exit $?` keeps the shell alive as the search's parent: its /proc/<pid>/environ holds the key and
            # is readable by any process of the same user, candidates included.
            shell = f'"$0" -m ksearch.cli {" ".join(run_args(server, runs))}; exit $?'
            proc = subprocess.run([*NOBODY, "sh", "-c", shell, exe], env=env, capture_output=True, text=True,
                                  timeout=900, cwd=work)
            requests = list(server.requests)
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
        assert SECRET not in proc.stdout + proc.stderr
        run = next(d for d in runs.iterdir() if (d / "run.db").is_file())
        hunted = check_run(run, requests, tmp_path)
        assert "'env': None" in hunted
        assert "'parent': 'denied'" in hunted  # the search made itself non-dumpable
        if sandbox == "off" or "'proc': []" not in hunted:
            # Uncontained, the candidate reads the key in the shell's environment: it is redacted on the way in.
            assert f"LLM_AUTH={MASK}" in hunted
        else:
            # Contained, other processes' /proc entries are out of its reach: it finds nothing to redact.
            assert "LLM_AUTH" not in hunted
    finally:
        shutil.rmtree(work, ignore_errors=True)


def test_a_key_with_a_line_end_is_taken_without_it_and_redacted(monkeypatch: pytest.MonkeyPatch) -> None:
    # export LLM_AUTH_FILE="$(cat keyfile)" keeps the \r of a file written on Windows
    monkeypatch.setenv("LLM_AUTH_FILE", SECRET + "-file\r\n")
    assert keys.take_key("LLM_AUTH_FILE") == SECRET + "-file"
    assert keys.take_key("LLM_AUTH_FILE") == SECRET + "-file"  # the second client of the process
    from ksearch.store.redact import SECRETS

    assert SECRETS.text(f"Bearer {SECRET}-file") == f"Bearer {MASK}"
