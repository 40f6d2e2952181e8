"""The parent's handle on one worker process: spawn, talk with deadlines, watch memory, kill hard."""

from __future__ import annotations

import contextlib
import os
import select
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
from ksearch.harness import protocol

#: Environment variables never handed to a worker: a candidate must not be able to read credentials.
_SECRET_MARKERS = ("KEY", "TOKEN", "SECRET", "PASSWORD", "CREDENTIAL")


def _worker_env(extra: dict[str, str]) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not any(m in k.upper() for m in _SECRET_MARKERS)}
    env.pop("KSEARCH_RUNS_DIR", None)  # the worker is never told where runs live
    src = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = src + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    env.update(extra)
    return env


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


def _tail(path: Path, limit: int = 2000) -> str:
    try:
        data = path.read_bytes()
    except OSError:
        return ""
    text = data[-limit:].decode(errors="replace")
    return ("..." if len(data) > limit else "") + text


class WorkerProcess:
    """One worker. Use as a context manager; `kill()` is always safe."""

    def __init__(self, role: str, memory_limit_bytes: int, env: dict[str, str] | None = None) -> None:
        self.role = role
        self.memory_limit = memory_limit_bytes
        self.scratch = Path(tempfile.mkdtemp(prefix=f"ksearch-{role}-"))
        self.guard_r, guard_w = os.pipe()
        os.set_blocking(self.guard_r, False)
        parent_sock, child_sock = socket.socketpair()
        self.sock = parent_sock
        self.stdout_path = self.scratch / "stdout.txt"
        self.stderr_path = self.scratch / "stderr.txt"
        extra = {"KSEARCH_WORKER_FD": str(child_sock.fileno()), **(env or {})}
        with open(self.stdout_path, "wb") as out, open(self.stderr_path, "wb") as err:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "ksearch.harness.worker"],
                cwd=self.scratch,
                env=_worker_env(extra),
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=err,
                pass_fds=(child_sock.fileno(), guard_w),
                start_new_session=True,  # its own process group: a kill takes any children it spawned too
            )
        child_sock.close()
        os.close(guard_w)
        self.guard_fd_in_child = guard_w
        self.peak_rss = 0
        self.stops_seen = 0
        self.forbidden_calls: list[str] = []
        # Every descendant seen while polling. A process group kill misses children that started their own session
        # (setsid); these are killed by pid (psutil checks the creation time, so a reused pid is never hit).
        self._descendants: dict[int, psutil.Process] = {}

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
            # The worker's own peak since it started, not only what it holds right now (see _peak_rss_linux).
            return max(total, _peak_rss_linux(self.proc.pid))
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
        err = _tail(self.stderr_path)
        return f"worker {how}" + (f"; stderr:\n{err}" if err.strip() else "")

    # -- messaging -----------------------------------------------------------------------------------------------
    def request(
        self, header: dict[str, Any], deadline: float, max_bytes: int = 1 << 36, stop_at: float | None = None
    ) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
        """Send one message and wait for the reply. With `stop_at` (time.monotonic()), a `stop` message follows when
        no reply has come by then: it ends a batch of timed calls at a moment the worker cannot foresee."""
        try:
            protocol.send(self.sock, header)
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
        out, err = _tail(self.stdout_path, 1000), _tail(self.stderr_path, 1000)
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
        with contextlib.suppress(OSError):
            os.close(self.guard_r)
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


def start(role: str, task_origin: str, device: str, memory_limit: int, deadline: float,
          source: str | None = None, forbidden: tuple[str, ...] = (), entry: str | None = None,
          env: dict[str, str] | None = None, emulation: str | None = None) -> tuple[WorkerProcess, dict[str, Any]]:
    """Spawn a worker and initialise it; returns the worker and its init reply. `emulation` ("cpu"): the worker runs
    Metal kernels through the Metal emulation (ksearch.metalemu.surface.install) before any code under test loads."""
    if role == "candidate":
        protect_parent()
    w = WorkerProcess(role, memory_limit, env=env)
    msg: dict[str, Any] = {"op": "init", "role": role, "task": task_origin, "device": device,
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
    return w, reply


def now() -> float:
    return time.monotonic()
