"""Containment of a candidate's process: hostile candidates (tests/candidates/) judged by the real Evaluator on the
CPU backend. Each computes an honest softmax, so the verdict must stay `passed` while its attack fails.

The mechanisms are probed here independently of the harness: a test skips only where the kernel lacks the mechanism
it relies on, and `test_the_kernels_mechanisms_are_applied` fails (rather than skips) on a Linux machine that offers
them but where the harness did not apply them.
"""

from __future__ import annotations

import ctypes
import hashlib
import json
import os
import shutil
import socket
import sqlite3
import stat
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import psutil
import pytest

from ksearch.harness import EvalOptions, EvalResult, evaluate
from ksearch.tasks import get_task

CANDIDATES = Path(__file__).parent / "candidates"
ROOT = Path(__file__).resolve().parents[1]
LINUX = sys.platform.startswith("linux")
HONEST = (
    "import mlx.core as mx\n"
    "def run(x):\n"
    "    xf = x.astype(mx.float32)\n"
    "    e = mx.exp(xf - mx.max(xf, axis=-1, keepdims=True))\n"
    "    return (e / mx.sum(e, axis=-1, keepdims=True)).astype(x.dtype)\n"
)


def _landlock_abi() -> int:
    if not LINUX:
        return 0
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    return max(0, int(libc.syscall(ctypes.c_long(444), None, ctypes.c_size_t(0), ctypes.c_uint32(1))))


def _namespaces() -> bool:
    """Whether this user may enter new user, network and PID namespaces (probed in a throwaway process)."""
    if not LINUX:
        return False
    code = ("import ctypes, os\n"
            "libc = ctypes.CDLL(None, use_errno=True)\n"
            "os._exit(0 if libc.unshare(0x10000000 | 0x40000000 | 0x20000000 | 0x00020000) == 0 else 1)\n")
    return subprocess.run([sys.executable, "-I", "-S", "-c", code], timeout=30).returncode == 0


LANDLOCK = _landlock_abi()
NAMESPACES = _namespaces()
needs_landlock = pytest.mark.skipif(not LANDLOCK, reason="this kernel has no Landlock (or it is disabled)")
needs_containment = pytest.mark.skipif(not (LANDLOCK or NAMESPACES),
                                       reason="neither Landlock nor unprivileged namespaces are available here")


def judge(backend: Any, candidate: str, sandbox: str = "auto", **options: Any) -> EvalResult:
    task = get_task("softmax")
    options.setdefault("workloads", [task.select_workloads("cpu")[0].name])
    options.setdefault("timeout_s", 120.0)
    source = HONEST if candidate == "honest" else (CANDIDATES / f"{candidate}.py").read_text()
    old = os.environ.get("KSEARCH_SANDBOX")
    os.environ["KSEARCH_SANDBOX"] = sandbox
    try:
        return evaluate(task, source, backend, EvalOptions(**options))
    finally:
        if old is None:
            os.environ.pop("KSEARCH_SANDBOX")
        else:
            os.environ["KSEARCH_SANDBOX"] = old


def _with_marker(marker: str) -> list[psutil.Process]:
    found = []
    for p in psutil.process_iter(["cmdline", "status"]):
        if marker in (p.info["cmdline"] or []) and p.info["status"] != psutil.STATUS_ZOMBIE:
            found.append(p)
    return found


@pytest.fixture
def marker():
    value = f"ksearch-test-{os.getpid()}-{time.monotonic_ns()}"
    yield value
    for p in _with_marker(value):  # whatever a failed test left behind
        p.kill()


def _applied(result: EvalResult) -> dict[str, str]:
    c = result.environment.get("containment")
    assert isinstance(c, dict), result.environment
    return c


# -- what the worker is given ----------------------------------------------------------------------------------------

def test_the_workers_environment_is_an_allowlist(tmp_path):
    from ksearch.harness.process import worker_env

    parent = {"LLM_AUTH": SECRET, "OPENAI_API_KEY": SECRET, "NVIDIA_API_KEY": SECRET, "KSEARCH_LLM_API_KEY": SECRET,
              "KSEARCH_LLM_BASE_URL": "http://x", "KSEARCH_RUNS_DIR": "/srv/runs", "AWS_SECRET_ACCESS_KEY": SECRET,
              "MLX_AUTH_TOKEN": SECRET, "HF_TOKEN": SECRET, "SSH_AUTH_SOCK": "/run/agent", "DATABASE_URL": SECRET,
              "PATH": "/usr/bin", "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8", "CUDA_VISIBLE_DEVICES": "0",
              "MLX_USE_CUDA_GRAPHS": "0", "KSEARCH_TEST_OWNER": "x", "HOME": "/home/u", "TMPDIR": "/var/tmp",
              "MLX_PTX_CACHE_DIR": "/shared/ptx", "KSEARCH_CACHE": "/shared/ksearch"}
    trusted = worker_env({}, parent=parent)
    candidate = worker_env({"KSEARCH_WORKER_FD": "5"}, tmp_path, parent=parent)
    for env in (trusted, candidate):
        assert SECRET not in env.values()
        assert {"PATH", "LANG", "LC_ALL", "CUDA_VISIBLE_DEVICES", "MLX_USE_CUDA_GRAPHS", "KSEARCH_TEST_OWNER"} <= set(env)
        assert not {"KSEARCH_LLM_BASE_URL", "KSEARCH_RUNS_DIR", "SSH_AUTH_SOCK"} & set(env)
    assert trusted["HOME"] == "/home/u" and trusted["MLX_PTX_CACHE_DIR"] == "/shared/ptx"
    assert trusted["KSEARCH_CACHE"] == "/shared/ksearch"
    for name in ("HOME", "TMPDIR", "XDG_CACHE_HOME", "CUDA_CACHE_PATH", "MLX_PTX_CACHE_DIR", "KSEARCH_CACHE"):
        assert candidate[name].startswith(str(tmp_path)), name
    assert candidate["KSEARCH_WORKER_FD"] == "5"


def test_a_readable_tree_never_includes_the_runs_directory(tmp_path):
    from ksearch.harness.landlock import _carve

    for d in ("project/src/pkg", "project/runs/r1", "project/docs"):
        (tmp_path / d).mkdir(parents=True)
    (tmp_path / "project" / "README").write_text("x")
    roots = _carve(str(tmp_path / "project"), [str(tmp_path / "project" / "runs")])
    assert sorted(Path(r).name for r in roots) == ["README", "docs", "src"]
    assert _carve(str(tmp_path / "project" / "runs" / "r1"), [str(tmp_path / "project" / "runs")]) == []


def test_an_installation_in_the_temporary_directory_is_readable_and_nothing_beside_it(tmp_path, monkeypatch):
    # A checkout cloned under /tmp, its virtual environment inside it: without its trees no worker can start (every
    # candidate failed with "Permission denied: .../.venv/pyvenv.cfg"); its siblings there stay hidden.
    from ksearch.harness import landlock

    venv, src, other = tmp_path / "clone" / ".venv", tmp_path / "clone" / "src", tmp_path / "ksearch_other_run"
    for d in (venv / "bin", src, other):
        d.mkdir(parents=True)
    for name in ("prefix", "exec_prefix"):
        monkeypatch.setattr(sys, name, str(venv))
    site = tmp_path / "elsewhere" / "site-packages"  # a package folder on PYTHONPATH, as a nobody-run search has
    site.mkdir(parents=True)
    monkeypatch.setattr(sys, "path", [str(src)])
    monkeypatch.setenv("PYTHONPATH", str(site))
    monkeypatch.setenv("PATH", f"{venv / 'bin'}{os.pathsep}{other}")
    roots = landlock.read_roots({}, str(src), "builtin")
    assert str(venv) in roots and str(src) in roots and str(site) in roots
    assert not any(r == str(other) or r.startswith(str(other) + "/") for r in roots)
    assert not any(r in ("/tmp", str(tmp_path), str(tmp_path / "clone")) for r in roots)


# -- the mechanisms ------------------------------------------------------------------------------------------------

def test_the_kernels_mechanisms_are_applied(cpu_backend):
    if not LINUX:
        pytest.skip(f"containment is Linux-only; {sys.platform} records why it has none")
    if not (LANDLOCK or NAMESPACES) and not os.environ.get("KSEARCH_TEST_UNCONTAINED_OK"):
        pytest.fail("this Linux machine offers neither Landlock nor unprivileged namespaces, so every containment "
                    "test would skip; set KSEARCH_TEST_UNCONTAINED_OK=1 where that is expected")
    result = judge(cpu_backend, "honest", baseline="naive")
    assert result.status == "passed", result.message
    assert 0.2 < result.workloads[0].speedup < 5  # an honest candidate is judged as before
    c = _applied(result)
    assert c["environment"] == "allowlist"
    if LANDLOCK:
        assert c["filesystem"].startswith(f"landlock abi {LANDLOCK}:"), c
    if NAMESPACES:
        assert c["processes"] == "pid namespace", c
        assert c["other_processes"] == "pid namespace with its own /proc", c
        assert c["network"].startswith("namespace"), c
    elif LANDLOCK >= 4:
        assert c["network"].startswith("landlock tcp"), c


def test_uncontained_is_recorded(cpu_backend):
    result = judge(cpu_backend, "honest", sandbox="off")
    assert result.status == "passed", result.message
    assert _applied(result)["filesystem"] == "none: disabled by KSEARCH_SANDBOX=off"
    assert _applied(result)["environment"] == "allowlist"  # worker_env's, with or without the sandbox


# -- processes -----------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("sandbox", ["auto", "no-namespaces", "no-pid"])
def test_a_setsid_daemon_dies_with_the_evaluation(cpu_backend, marker, sandbox):
    # no-namespaces: the fallback where the launcher, a child subreaper, kills what was reparented to it; no-pid: what
    # a GPU worker gets (NVIDIA's unified memory refuses a PID namespace), the other namespaces without the PID one.
    if LINUX and sandbox in ("no-namespaces", "no-pid") and not LANDLOCK:
        pytest.skip("without Landlock a same-user candidate can kill the subreaper itself")
    if not LINUX:
        pytest.skip("macOS has neither PID namespaces nor a child subreaper")
    result = judge(cpu_backend, "daemon_setsid", sandbox=sandbox, extra_env={"KSEARCH_TEST_MARKER": marker})
    assert result.status == "passed", result.message
    assert "daemon started" in result.message
    if sandbox == "auto" and NAMESPACES:
        assert _applied(result)["processes"] == "pid namespace"
    elif sandbox in ("no-namespaces", "no-pid"):
        assert _applied(result)["processes"].startswith("subreaper")
    if sandbox == "no-pid" and NAMESPACES:
        assert _applied(result)["network"].startswith("namespace")
    deadline = time.monotonic() + 5
    while _with_marker(marker) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _with_marker(marker), "a daemon the candidate started outlived the evaluation"


# -- files ---------------------------------------------------------------------------------------------------------

def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@needs_landlock
def test_the_run_database_is_out_of_reach(cpu_backend, tmp_path):
    db_path = tmp_path / "runs" / "softmax-0001" / "run.db"
    db_path.parent.mkdir(parents=True)
    db = sqlite3.connect(db_path)
    for table in ("evaluations", "calls", "events"):
        db.execute(f"CREATE TABLE {table} (id INTEGER PRIMARY KEY, body TEXT)")
        db.executemany(f"INSERT INTO {table} (body) VALUES (?)", [(f"{table} {i}",) for i in range(5)])
    db.commit()
    db.close()
    before = _digest(db_path)
    result = judge(cpu_backend, "database_attack", extra_env={"KSEARCH_TEST_TARGET": str(db_path)})
    assert result.status == "passed", result.message
    for attempt in ("read", "delete rows", "truncate", "remove"):
        assert f"{attempt}: refused" in result.message, result.message
    assert str(db_path) not in result.message.split("found:")[1].splitlines()[0]
    assert _digest(db_path) == before
    with sqlite3.connect(db_path) as db:
        assert [db.execute(f"SELECT COUNT(*) FROM {t}").fetchone()[0] for t in ("evaluations", "calls", "events")] \
            == [5, 5, 5]


@pytest.mark.parametrize("sandbox", ["auto", "no-landlock"])
def test_writes_outside_scratch_are_refused(cpu_backend, marker, sandbox):
    # no-landlock: the fallback of a mount namespace in which every mount but the scratch directory is read-only.
    if sandbox == "auto" and not LANDLOCK:
        pytest.skip("this kernel has no Landlock")
    if sandbox == "no-landlock" and not NAMESPACES:
        pytest.skip("no unprivileged mount namespace here")
    targets = [Path("/tmp") / f"{marker}.txt", ROOT / f"{marker}.txt", Path("/dev/shm") / f"{marker}.txt"]
    try:
        result = judge(cpu_backend, "write_outside", sandbox=sandbox,
                       extra_env={"KSEARCH_TEST_PATHS": os.pathsep.join(map(str, targets))})
        written = [t for t in targets if t.exists()]
    finally:
        for t in targets:
            t.unlink(missing_ok=True)
    assert result.status == "passed", result.message
    assert not written, f"the candidate wrote outside its scratch directory: {written}"
    assert all(f"refused {t}" in result.message for t in targets), result.message
    assert "inside.txt" in result.message and "wrote " in result.message  # its scratch directory stays writable


# -- network -------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("sandbox", ["auto", "no-namespaces"])
def test_no_connection_to_localhost(cpu_backend, sandbox):
    # no-namespaces: Landlock's TCP rules alone (they do not cover UDP).
    namespaces = NAMESPACES and sandbox == "auto"
    if not namespaces and LANDLOCK < 4:
        pytest.skip("neither a network namespace nor Landlock's TCP rules (ABI 4) are available")
    with socket.socket() as tcp, socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as udp:
        tcp.bind(("127.0.0.1", 0))
        tcp.listen()
        tcp.setblocking(False)
        udp.bind(("127.0.0.1", 0))
        udp.setblocking(False)
        ports = f"{tcp.getsockname()[1]},{udp.getsockname()[1]}"
        result = judge(cpu_backend, "network_connect", sandbox=sandbox, extra_env={"KSEARCH_TEST_PORTS": ports})
        with pytest.raises(BlockingIOError):
            tcp.accept()
        if namespaces:
            with pytest.raises(BlockingIOError):
                udp.recvfrom(100)
    assert result.status == "passed", result.message
    assert "tcp: refused" in result.message, result.message


# -- secrets -------------------------------------------------------------------------------------------------------

SECRET = "sk-planted-7f3a9c"


def _check_no_secret(result: dict[str, Any]) -> None:
    assert result["status"] == "passed", result["message"]
    assert SECRET not in json.dumps(result)
    names = result["message"].split("own environment:")[1].splitlines()[0].split()
    assert "LLM_AUTH" not in names and "OPENAI_API_KEY" not in names
    assert "holding the key: 0" in result["message"], result["message"]


@pytest.mark.parametrize("sandbox", ["auto", "no-namespaces"])
def test_no_secret_reaches_the_candidate(cpu_backend, monkeypatch, sandbox):
    # The key sits in the judge's environment under a name no denylist would catch, and in the environment of a
    # process of the same user that stands for the shell that started the search (without capabilities, as a
    # user's shell has none: a process without capabilities may not read one that has them).
    # no-namespaces: Landlock alone must keep /proc/<pid>/environ of other processes out of reach.
    if sandbox == "auto" and not (LANDLOCK or NAMESPACES) or sandbox == "no-namespaces" and not LANDLOCK:
        pytest.skip("the mechanism this case relies on is not available here")
    monkeypatch.setenv("LLM_AUTH", SECRET)
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)
    capless = ["setpriv", "--inh-caps=-all", "--bounding-set=-all"] if shutil.which("setpriv") else []
    shell = subprocess.Popen([*capless, "sleep", "300"], env={**os.environ, "LLM_AUTH": SECRET})
    try:
        result = judge(cpu_backend, "read_secrets", sandbox=sandbox,
                       extra_env={"KSEARCH_TEST_TARGET_PID": str(shell.pid)})
    finally:
        shell.kill()
        shell.wait()
    _check_no_secret(result.to_json())


_AS_NOBODY = """
import json, os, subprocess, sys
from ksearch.backends import get_backend
from ksearch.harness import EvalOptions, evaluate
from ksearch.tasks import get_task

source = sys.stdin.read()
task = get_task("softmax")
shell = subprocess.Popen(["sleep", "300"])
out = {"uid": os.getuid()}
try:
    for mode in ("auto", "off"):
        os.environ["KSEARCH_SANDBOX"] = mode
        r = evaluate(task, source, get_backend("mlx-cpu"),
                     EvalOptions(workloads=[task.select_workloads("cpu")[0].name], timeout_s=120,
                                 extra_env={"KSEARCH_TEST_TARGET_PID": str(shell.pid)}))
        out[mode] = r.to_json()
finally:
    shell.kill()
print(json.dumps(out))
"""


def _blocked_ancestor(path: str) -> tuple[str, str] | None:
    """The first directory above `path` that other users cannot enter (e.g. /root), and its child on the way."""
    parts = Path(os.path.realpath(path)).parts
    for i in range(2, len(parts)):
        d = Path(*parts[:i])
        if not d.stat().st_mode & stat.S_IXOTH:
            return str(d), str(Path(*parts[: i + 1]))
    return None


@needs_containment
def test_no_secret_reaches_the_candidate_as_an_unprivileged_user(cpu_backend):
    # As root, the judge runs here as the user nobody (in a private mount namespace where the interpreter stays
    # reachable if it lives under a directory such as /root). Uncontained, the same candidate does read the key from
    # its user's other process: the check is not vacuous.
    if os.geteuid() != 0:
        pytest.skip("not root: the other tests of this file already run as an unprivileged user")
    if not shutil.which("setpriv") or not shutil.which("unshare"):
        pytest.skip("needs setpriv and unshare (util-linux) to run the judge as nobody")
    if _blocked_ancestor(str(ROOT)):
        pytest.skip(f"this checkout ({ROOT}) is not readable by nobody")
    blocked = _blocked_ancestor(sys.base_prefix)
    wrapper = ["sh", "-c"]
    script = "set -e\n"
    if blocked:
        wrapper = ["unshare", "-m", "--propagation", "private", "sh", "-c"]
        if subprocess.run(wrapper[:-2] + ["true"], capture_output=True).returncode != 0:
            pytest.skip(f"the interpreter is under {blocked[0]}, which nobody cannot enter, and no mount namespace "
                        "is available to make it reachable")
        script += ('hold=$(mktemp -d)\nmount --bind "$KEEP" "$hold"\nmount -t tmpfs -o mode=755 tmpfs "$BLOCKED"\n'
                   'mkdir -p "$KEEP"\nmount --move "$hold" "$KEEP"\n')
    script += 'cd /tmp\nexec setpriv --reuid=65534 --regid=65534 --clear-groups "$@"\n'
    env = {"PATH": os.environ["PATH"], "PYTHONPATH": str(ROOT / "src"), "LLM_AUTH": SECRET, "HOME": "/tmp",
           "KEEP": blocked[1] if blocked else "", "BLOCKED": blocked[0] if blocked else ""}
    proc = subprocess.run([*wrapper, script, "sh", sys.executable, "-c", _AS_NOBODY], capture_output=True, text=True,
                          input=(CANDIDATES / "read_secrets.py").read_text(), env=env, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["uid"] == 65534
    _check_no_secret(out["auto"])
    assert out["off"]["status"] == "passed", out["off"]["message"]
    assert "holding the key: 0" not in out["off"]["message"], "uncontained, the candidate should have found the key"


@needs_landlock
def test_a_task_file_in_the_temporary_directory_is_readable_to_the_contained_worker(cpu_backend, tmp_path):
    # The temporary directory is out of a candidate's reach, except the one task file it is judged against.
    from ksearch.tasks.registry import load_task_file

    path = tmp_path / "scaled_add.py"
    shutil.copy(ROOT / "tests" / "data" / "user_task.py", path)
    (tmp_path / "other.txt").write_text("not for the candidate")
    task = load_task_file(str(path))
    source = ("def run(x, y, alpha):\n"
              "    try:\n"
              f"        open({str(tmp_path / 'other.txt')!r}).read()\n"
              "    except PermissionError:\n"
              "        return x + alpha * y\n"
              "    raise SystemExit('read a file next to the task file')\n")
    result = evaluate(task, source, cpu_backend, EvalOptions(workloads=[task.select_workloads("cpu")[0].name],
                                                             timeout_s=120.0, baseline=None))
    assert result.status == "passed", result.message


def test_a_candidate_gets_a_copy_of_the_trusted_kernel_cache_never_the_cache_itself(tmp_path):
    # The harness's own device code is compiled once by the trusted workers; a candidate starts from a copy, and what
    # it writes into its copy never reaches the trusted cache.
    from ksearch.harness.process import seed_kernel_cache

    trusted = tmp_path / "ptx"
    trusted.mkdir()
    (trusted / "kernel_a.ptx").write_bytes(b"a" * 100)
    (trusted / "kernel_b.cubin").write_bytes(b"b" * 50)
    (trusted / "nested").mkdir()
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    assert seed_kernel_cache(scratch, trusted) == 150
    copied = scratch / "mlx-ptx" / "kernel_a.ptx"
    assert copied.read_bytes() == b"a" * 100 and not copied.is_symlink()
    copied.write_bytes(b"planted")
    assert (trusted / "kernel_a.ptx").read_bytes() == b"a" * 100
    assert not (scratch / "mlx-ptx" / "nested").exists()
    empty = tmp_path / "empty"
    empty.mkdir()
    assert seed_kernel_cache(scratch, empty) == 0
