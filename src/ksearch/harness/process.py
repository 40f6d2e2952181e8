"""The parent's handle on one worker process: spawn, talk with deadlines, watch memory, kill hard."""

from __future__ import annotations

import contextlib
import json
import os
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import psutil

from ksearch.errors import WorkerDied
from ksearch.harness import protocol, sandbox

#: What a worker's environment may hold: an allowlist, so that a credential reaches no worker whatever its name.
_ENV_NAMES = frozenset({
    "PATH", "HOME", "LANG", "LANGUAGE", "TZ", "TMPDIR", "USER", "LOGNAME", "LD_LIBRARY_PATH", "PYTHONPATH",
    "PYTHONHASHSEED", "PYTHONUNBUFFERED", "PYTHONFAULTHANDLER", "OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS",
    "MKL_NUM_THREADS", "VECLIB_MAXIMUM_THREADS", "CC", "CXX", "CPATH", "LIBRARY_PATH", "C_INCLUDE_PATH",
    "CPLUS_INCLUDE_PATH", "SDKROOT", "DEVELOPER_DIR", "XDG_CACHE_HOME",
})
_ENV_PREFIXES = ("LC_", "CUDA_", "NVIDIA_", "MLX_", "MTL_", "METAL_", "KSEARCH_")
#: ... and even there, nothing that looks like a credential, and none of the search's own settings.
_SECRET_MARKERS = ("KEY", "TOKEN", "SECRET", "PASS", "CREDENTIAL", "AUTH", "COOKIE", "PRIVATE")
_SEARCH_ONLY = ("KSEARCH_RUNS_DIR", "KSEARCH_LLM", "KSEARCH_SANDBOX")
_SRC = str(Path(__file__).resolve().parents[2])


def worker_env(extra: dict[str, str], scratch: Path | None = None, parent: dict[str, str] | None = None) -> dict[str, str]:
    """The environment a worker starts with. With `scratch` (an untrusted candidate's worker), its home, temporary
    and cache directories all point there: MLX's PTX cache, CUDA's compute cache and the Metal emulation's library
    cache (KSEARCH_CACHE) would otherwise be shared with the trusted workers, and a candidate could plant compiled
    kernels in them (contained, it cannot write there at all: every kernel it compiled failed)."""
    source = os.environ if parent is None else parent
    env = {k: v for k, v in source.items()
           if (k in _ENV_NAMES or k.startswith(_ENV_PREFIXES))
           and not any(m in k.upper() for m in _SECRET_MARKERS) and not k.startswith(_SEARCH_ONLY)}
    env["PYTHONPATH"] = _SRC + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    env["PYTHONUNBUFFERED"] = "1"  # what a candidate printed is in the file when the verdict quotes it
    if scratch is not None:
        s = str(scratch)
        env.update(HOME=s, TMPDIR=s, XDG_CACHE_HOME=f"{s}/.cache", CUDA_CACHE_PATH=f"{s}/.nv/ComputeCache",
                   MLX_PTX_CACHE_DIR=f"{s}/mlx-ptx", KSEARCH_CACHE=f"{s}/.cache/ksearch")
    env.update(extra)
    return env


#: A trusted kernel cache larger than this is not copied for a candidate (it then compiles what it needs itself).
_SEED_CACHE_MAX_BYTES = 64 << 20


def trusted_ptx_cache() -> Path | None:
    """Where the trusted workers' MLX keeps the kernels it compiled with NVRTC (MLX's own default: the temporary
    directory's mlx/VERSION/ptx, unless MLX_PTX_CACHE_DIR says otherwise); None where there is none."""
    import importlib.metadata

    named = os.environ.get("MLX_PTX_CACHE_DIR")
    if named:
        path = Path(named)
    else:
        try:
            version = importlib.metadata.version("mlx")
        except importlib.metadata.PackageNotFoundError:
            return None
        path = Path(tempfile.gettempdir()) / "mlx" / version / "ptx"
    return path if path.is_dir() else None


def seed_kernel_cache(scratch: Path, trusted: Path | None = None) -> int:
    """Copy the trusted workers' compiled MLX kernels into a candidate's own cache (scratch/mlx-ptx), so that the
    harness's own device code (input generation, stamps, fingerprints) is not compiled again for every candidate:
    measured on the H200, that made a softmax evaluation's timing phase 13-16 s instead of about 2 s. A copy, never
    a link: what the candidate writes there stays in its scratch directory. Returns the bytes copied."""
    source = trusted if trusted is not None else trusted_ptx_cache()
    if source is None:
        return 0
    files = [f for f in source.iterdir() if f.is_file() and not f.is_symlink()]
    total = sum(f.stat().st_size for f in files)
    if not files or total > _SEED_CACHE_MAX_BYTES:
        return 0
    target = scratch / "mlx-ptx"
    target.mkdir(exist_ok=True)
    for f in files:
        shutil.copyfile(f, target / f.name)
    return total


def protect_parent() -> None:
    """Make this (judging) process non-dumpable on Linux. A worker runs as the same user, and a same-user process may
    otherwise open /proc/<parent>/fd/1 and write a forged verdict into the parent's stdout (reproduced: a line
    `{"status": "passed"}` ahead of `ksearch eval --json`'s own object), read the secret seeds from /proc/<parent>/mem,
    or ptrace the judge. A non-dumpable process's /proc entries belong to root, which closes all three. The flag is
    reset on exec, so workers are unaffected; the only cost is that this process writes no core dump."""
    if sys.platform.startswith("linux"):
        with contextlib.suppress(OSError, AttributeError):
            import ctypes

            ctypes.CDLL(None, use_errno=True).prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE = 4


def _peak_rss_linux(pid: int) -> int:
    """The kernel's high-water mark of a process's resident memory (VmHWM): a candidate that allocates far past the
    cap and frees it again between two polls is still caught."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return 0


def _tail(fd: int, limit: int = 2000) -> str:
    """The end of a worker's stdout or stderr, read through the parent's own descriptor: the file's name is in the
    candidate's scratch directory, and a symlink put there in its place must not make the parent read another file."""
    if fd < 0:
        return ""
    try:
        size = os.fstat(fd).st_size
        data = os.pread(fd, limit, max(0, size - limit))
    except OSError:
        return ""
    return ("..." if size > limit else "") + data.decode(errors="replace")


def _uncontained(why: str) -> dict[str, str]:
    # worker_env's allowlist applies with or without the sandbox.
    return {"filesystem": why, "network": why, "other_processes": why,
            "processes": "process group and polled descendants (a daemon that leaves both may survive)",
            "environment": "allowlist"}


class WorkerProcess:
    """One worker. Use as a context manager; `kill()` is always safe."""

    def __init__(self, role: str, memory_limit_bytes: int, env: dict[str, str] | None = None,
                 task_origin: str = "", gpu: bool = False, prefix: list[str] | None = None) -> None:
        self.role = role
        self.memory_limit = memory_limit_bytes
        self.scratch = Path(tempfile.mkdtemp(prefix=f"ksearch-{role}-"))
        self.guard_r, guard_w = os.pipe()
        os.set_blocking(self.guard_r, False)
        parent_sock, child_sock = socket.socketpair()
        self.sock = parent_sock
        self.stdout_path = self.scratch / "stdout.txt"
        self.stderr_path = self.scratch / "stderr.txt"
        extra = {"KSEARCH_WORKER_FD": str(child_sock.fileno()), "KSEARCH_WORKER_DEVICE": "gpu" if gpu else "cpu",
                 **(env or {})}
        # `prefix`: a profiler's command line (ncu ...), which starts the worker as its child, inside the sandbox.
        argv = [*(prefix or []), sys.executable, "-m", "ksearch.harness.worker"]
        fds = [child_sock.fileno(), guard_w]
        # Only the untrusted candidate is contained (sandbox.py); the trusted workers get the allowlisted environment.
        untrusted = role == "candidate"
        why = sandbox.unavailable() if untrusted else "none: a trusted worker"
        self.contained = why is None
        self.containment: dict[str, str] = _uncontained(why) if why else {}
        self._status_r = -1
        if untrusted:
            with contextlib.suppress(OSError):
                seed_kernel_cache(self.scratch)
        if self.contained:
            self._status_r, status_w = os.pipe()
            fds.append(status_w)
            spec = sandbox.plan(str(self.scratch), status_w, worker_env({}), _SRC, task_origin, gpu=gpu,
                                profiler=prefix[0] if prefix else None)
            argv = sandbox.command(spec, argv)
        with open(self.stdout_path, "wb") as out, open(self.stderr_path, "wb") as err:
            self._out_fd = os.open(self.stdout_path, os.O_RDONLY | os.O_CLOEXEC)
            self._err_fd = os.open(self.stderr_path, os.O_RDONLY | os.O_CLOEXEC)
            self.proc = subprocess.Popen(
                argv,
                cwd=self.scratch,
                env=worker_env(extra, self.scratch if untrusted else None),
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=err,
                pass_fds=fds,
                start_new_session=True,  # its own process group: a kill takes any children it spawned too
            )
        child_sock.close()
        os.close(guard_w)
        if self.contained:
            os.close(fds[-1])
        self.guard_fd_in_child = guard_w
        self.peak_rss = 0
        self.stops_seen = 0
        self.forbidden_calls: list[str] = []
        # Every descendant seen while polling. A process group kill misses children that started their own session
        # (setsid); these are killed by pid (psutil checks the creation time, so a reused pid is never hit).
        self._descendants: dict[int, psutil.Process] = {}

    def read_containment(self) -> dict[str, str]:
        """What the sandbox applied, as it reported before the worker started (so before any candidate code ran)."""
        if self._status_r >= 0:
            data = b""
            with contextlib.suppress(OSError):
                os.set_blocking(self._status_r, False)
                while chunk := os.read(self._status_r, 65536):
                    data += chunk
            os.close(self._status_r)
            self._status_r = -1
            try:
                self.containment = {str(k): str(v) for k, v in json.loads(data).items()}
            except (ValueError, AttributeError):
                self.containment = _uncontained("none: the sandbox did not report (it failed before the worker "
                                                "started)")
            self.containment["environment"] = "allowlist"
        return self.containment

    # -- liveness and limits -------------------------------------------------------------------------------------
    def _rss(self) -> int:
        try:
            p = psutil.Process(self.proc.pid)
            children = p.children(recursive=True)
            for c in children:
                self._descendants.setdefault(c.pid, c)
            total = 0
            for q in [p, *children]:
                with contextlib.suppress(psutil.NoSuchProcess, psutil.AccessDenied):
                    total += q.memory_info().rss
            # Each process's own peak since it started, not only what it holds right now (see _peak_rss_linux); a
            # contained worker is a grandchild of the process started here.
            return max(total, *(_peak_rss_linux(q.pid) for q in [p, *children]))
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            return 0

    def _poll(self) -> None:
        self._drain_guard()
        rss = self._rss()
        self.peak_rss = max(self.peak_rss, rss)
        if rss > self.memory_limit:
            self.kill()
            raise WorkerDied(
                f"worker used {rss / 2**20:.0f} MiB, above the memory limit of {self.memory_limit / 2**20:.0f} MiB",
                kind="memory",
            )
        if self.proc.poll() is not None:
            raise WorkerDied(self.death_message(), kind="crash")
        self._resume_if_stopped()

    def _resume_if_stopped(self) -> None:
        """Any process of this user can SIGSTOP a worker (a candidate aiming at the trusted reference or baseline
        worker, say); a stopped worker would hold the parent until its deadline. Resume it and remember it: a
        baseline timed while it was being stopped is not to be believed."""
        try:
            stopped = psutil.Process(self.proc.pid).status() in (psutil.STATUS_STOPPED, psutil.STATUS_TRACING_STOP)
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            return
        if stopped:
            self.stops_seen += 1
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.proc.pid, signal.SIGCONT)

    def _drain_guard(self) -> None:
        try:
            data = os.read(self.guard_r, 65536)
        except (BlockingIOError, OSError):
            return
        if data:
            self.forbidden_calls.extend(x for x in data.decode(errors="replace").splitlines() if x)

    def death_message(self) -> str:
        code = self.proc.poll()
        if code is None:
            how = "stopped answering"
        elif code < 0:
            try:
                how = f"was killed by {signal.Signals(-code).name}"
            except ValueError:
                how = f"was killed by signal {-code}"
        else:
            how = f"exited with code {code}"
        err = _tail(self._err_fd)
        return f"worker {how}" + (f"; stderr:\n{err}" if err.strip() else "")

    # -- messaging -----------------------------------------------------------------------------------------------
    def request(
        self, header: dict[str, Any], deadline: float, max_bytes: int = 1 << 36, stop_at: float | None = None,
        arrays: dict[str, np.ndarray] | None = None,
    ) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
        """Send one message (with `arrays`, where the op takes some) and wait for the reply. With `stop_at`
        (time.monotonic()), a `stop` message follows when no reply has come by then: it ends a batch of timed calls
        at a moment the worker cannot foresee."""
        try:
            protocol.send(self.sock, header, arrays)
            if stop_at is not None and not self._readable_before(min(stop_at, deadline)):
                protocol.send(self.sock, {"op": "stop"})
            reply, arrays = protocol.recv(self.sock, deadline=deadline, max_bytes=max_bytes, poll=self._poll)
        except protocol.Deadline as exc:
            self.kill()
            raise WorkerDied("timed out", kind="timeout") from exc
        except (protocol.ProtocolError, OSError) as exc:
            # Give the process a moment to be reaped so the message says how it died.
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(timeout=2)
            if self.proc.poll() is None:
                self.kill()
                raise WorkerDied(f"broke the protocol: {exc}", kind="protocol") from exc
            raise WorkerDied(self.death_message(), kind="crash") from exc
        self._drain_guard()
        if self.proc.poll() is None and self._rss() > self.memory_limit:
            self._poll()  # raises WorkerDied(kind="memory"): the reply came too fast for a poll to see the peak
        return reply, arrays

    def _readable_before(self, when: float) -> bool:
        while True:
            remaining = when - time.monotonic()
            if remaining <= 0:
                return False
            ready, _, _ = select.select([self.sock], [], [], min(0.2, remaining))
            if ready:
                return True
            self._poll()

    def output_tail(self) -> str:
        out, err = _tail(self._out_fd, 1000), _tail(self._err_fd, 1000)
        parts = []
        if out.strip():
            parts.append("candidate stdout:\n" + out)
        if err.strip():
            parts.append("candidate stderr:\n" + err)
        return "\n".join(parts)

    def kill(self) -> None:
        # The group is killed even when the worker itself has already exited: its children outlive it otherwise
        # (found by a test: a candidate's `sleep forever` child survived a clean `exit`). A group id is not handed
        # out again while any member lives; close() leaves the worker unreaped until here, so the id is still ours.
        with contextlib.suppress(psutil.NoSuchProcess, psutil.AccessDenied):
            for c in psutil.Process(self.proc.pid).children(recursive=True):
                self._descendants.setdefault(c.pid, c)
        if self.contained and not self._exited():
            # The sandbox's launcher kills the worker and everything left below it (in its PID namespace, or as
            # their subreaper), which a kill from here cannot reach once a daemon has left the process group.
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.proc.pid, signal.SIGTERM)
            deadline = time.monotonic() + 5
            while time.monotonic() < deadline and not self._exited():
                time.sleep(0.01)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                self.proc.kill()
        for d in self._descendants.values():
            with contextlib.suppress(psutil.NoSuchProcess, psutil.AccessDenied):
                d.kill()  # psutil refuses if the pid now belongs to another process
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=5)

    def close(self) -> None:
        if self.proc.poll() is None:
            with contextlib.suppress(OSError):
                protocol.send(self.sock, {"op": "exit"})
            # Wait for the exit without reaping it (os.waitid with WNOWAIT): the group kill below still needs the pid.
            deadline = time.monotonic() + 2
            while time.monotonic() < deadline and not self._exited():
                time.sleep(0.01)
        self.kill()
        self._drain_guard()
        with contextlib.suppress(OSError):
            self.sock.close()
        for fd in (self.guard_r, self._out_fd, self._err_fd, self._status_r):
            if fd >= 0:
                with contextlib.suppress(OSError):
                    os.close(fd)
        self.guard_r = self._out_fd = self._err_fd = self._status_r = -1
        import shutil

        shutil.rmtree(self.scratch, ignore_errors=True)

    def _exited(self) -> bool:
        if self.proc.returncode is not None:
            return True
        try:
            info = os.waitid(os.P_PID, self.proc.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
        except ChildProcessError:
            return True
        return info is not None

    def __enter__(self) -> WorkerProcess:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def spawn(role: str, task_origin: str, device: str, memory_limit: int, env: dict[str, str] | None = None,
          prefix: list[str] | None = None) -> WorkerProcess:
    """A worker process, contained where it will run a candidate, waiting for its init (it imports what every role
    needs meanwhile, so that a worker spawned ahead of time is ready sooner). `prefix`: a profiler's command line
    that runs the worker (ksearch.harness.profile)."""
    if role == "candidate":
        protect_parent()
    return WorkerProcess(role, memory_limit, env=env, task_origin=task_origin, gpu=device == "gpu", prefix=prefix)


def initialise(w: WorkerProcess, task_origin: str, device: str, deadline: float, source: str | None = None,
               forbidden: tuple[str, ...] = (), entry: str | None = None,
               emulation: str | None = None) -> dict[str, Any]:
    """Send a spawned worker its init (the candidate's or baseline's source, the tripwires); its reply."""
    msg: dict[str, Any] = {"op": "init", "role": w.role, "task": task_origin, "device": device,
                           "forbidden": list(forbidden), "guard_fd": w.guard_fd_in_child, "entry": entry,
                           "emulation": emulation}
    if source is not None:
        path = w.scratch / "candidate.py"
        path.write_text(source)
        msg["source_file"] = str(path)
    try:
        reply, _ = w.request(msg, deadline)
    except BaseException:
        w.close()
        raise
    w.read_containment()
    return reply


def start(role: str, task_origin: str, device: str, memory_limit: int, deadline: float,
          source: str | None = None, forbidden: tuple[str, ...] = (), entry: str | None = None,
          env: dict[str, str] | None = None, emulation: str | None = None,
          prefix: list[str] | None = None) -> tuple[WorkerProcess, dict[str, Any]]:
    """Spawn a worker and initialise it; returns the worker and its init reply. `emulation` ("cpu"): the worker runs
    Metal kernels through the Metal emulation (ksearch.metalemu.surface.install) before any code under test loads."""
    w = spawn(role, task_origin, device, memory_limit, env, prefix)
    return w, initialise(w, task_origin, device, deadline, source, forbidden, entry, emulation)


def now() -> float:
    return time.monotonic()
