"""The worker process: builds inputs, runs a candidate (or the reference, or a baseline), ships raw results back.

Roles:
- candidate: untrusted. Loads the candidate file after the clock and the channel are captured and the forbidden-API
  tripwires are installed. Anything it reports is checked by the parent.
- reference: trusted, never loads candidate code. Computes reference outputs in float32 (TF32 disabled by the parent).
- baseline: trusted. Loads a built-in baseline source and times it with the same protocol as candidates.

Run as `python -m ksearch.harness.worker`; the parent passes the channel's file descriptor in KSEARCH_WORKER_FD.
"""

from __future__ import annotations

import collections
import contextlib
import ctypes
import importlib.util
import os
import select
import signal
import socket
import sys
import threading
import time
import traceback
from typing import Any

import numpy as np

from ksearch.harness import protocol
from ksearch.harness.timing import RING, SHIFT_BYTES, SHIFTS, WARMUP_MAX_CALLS

# Captured before any candidate code exists in this process.
_clock = time.perf_counter
_send = protocol.send


# See timing.py: how timed calls' inputs are rotated, and how many of their outputs are kept for spot checks.
_SHIFT_BYTES = SHIFT_BYTES
_SHIFTS = SHIFTS


def _step(v: Any, rotate: bool) -> int:
    return max(1, _SHIFT_BYTES // max(1, v.itemsize)) if rotate else 0


def rotated(mx: Any, inputs: dict[str, Any], shift: int, rotate: bool) -> dict[str, Any]:
    """The inputs a timed call with rotation `shift` sees, built directly (the reference worker's way): each tensor,
    flattened, rolled left by shift * step elements. Equal to the timing pool's view (see Worker._fresh)."""
    out = {}
    for name, v in inputs.items():
        off = shift * _step(v, rotate)
        if off and v.size:
            flat = v.reshape(-1)
            k = off % v.size
            v = mx.concatenate([flat[k:], flat[:k]]).reshape(v.shape) if k else v
        out[name] = v
    return out


def _die_with_parent() -> None:
    if sys.platform.startswith("linux"):
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
        except (OSError, AttributeError):
            pass
    parent = os.getppid()

    def watch() -> None:  # portable fallback (macOS has no PDEATHSIG)
        while True:
            time.sleep(0.5)
            if os.getppid() != parent:
                os._exit(70)

    threading.Thread(target=watch, daemon=True).start()


def _no_dumps() -> None:
    """Trusted workers (reference, baseline) are made non-dumpable so that a candidate running as the same user cannot
    ptrace them or write their memory through /proc to bend the reference or slow the baseline."""
    if sys.platform.startswith("linux"):
        with contextlib.suppress(OSError, AttributeError):
            ctypes.CDLL(None, use_errno=True).prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE = 4


def _drop_privileges() -> None:
    """Before candidate code exists: no new privileges, and every capability dropped (also from the bounding set, so
    an exec'd child cannot take them back). Matters when the harness runs as root (containers, CI): there
    CAP_SYS_PTRACE would let a candidate open /proc/<parent>/fd/1 and forge the verdict on the parent's stdout, or
    write the memory of the trusted workers, despite their being non-dumpable. Best effort: where a call is not
    permitted, nothing is lost that the candidate had not got anyway."""
    if not sys.platform.startswith("linux"):
        return
    try:
        libc = ctypes.CDLL(None, use_errno=True)
    except OSError:
        return
    libc.prctl(38, 1, 0, 0, 0)  # PR_SET_NO_NEW_PRIVS
    for cap in range(64):
        if libc.prctl(24, cap, 0, 0, 0) != 0 and ctypes.get_errno() == 22:  # PR_CAPBSET_DROP; EINVAL: no such cap
            break

    class Header(ctypes.Structure):
        _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]

    class Data(ctypes.Structure):
        _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32), ("inheritable", ctypes.c_uint32)]

    header = Header(0x20080522, 0)  # _LINUX_CAPABILITY_VERSION_3
    data = (Data * 2)()
    libc.capset(ctypes.byref(header), data)
    libc.prctl(47, 4, 0, 0, 0)  # PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL


class Worker:
    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.role = ""
        self.task: Any = None
        self.run: Any = None
        self.mx: Any = None
        self.pool: list[dict[str, tuple[Any, tuple[int, ...], int]]] = []
        self.params: dict[str, Any] = {}
        self._eval: Any = None
        self.staged: tuple[int, list[dict[str, Any]]] | None = None
        self.ring: collections.deque[Any] = collections.deque(maxlen=RING)
        self._synchronize: Any = None

    # -- setup ---------------------------------------------------------------------------------------------------
    def init(self, msg: dict[str, Any]) -> dict[str, Any]:
        import mlx.core as mx

        from ksearch.tasks import get_task

        self.mx = mx
        # Captured before any candidate code exists, like the clock: a candidate that replaces mx.eval and
        # mx.synchronize with no-ops made every timed call build a lazy graph and nothing else (reproduced: a 1300x
        # "speedup"; the trials still passed because shipping an output forces it).
        self._eval = mx.eval
        self._synchronize = getattr(mx, "synchronize", None)
        self.role = msg["role"]
        if msg.get("device") == "cpu":
            mx.set_default_device(mx.cpu)
        self.task = get_task(msg["task"])
        if self.role != "candidate":
            _no_dumps()
        if self.role == "reference":
            return {"ok": True}
        if self.role == "candidate":
            from ksearch.harness import guard

            guard.install(tuple(msg.get("forbidden", ())), msg.get("guard_fd"))
            _drop_privileges()
        path = msg["source_file"]
        try:
            spec = importlib.util.spec_from_file_location("candidate", path)
            assert spec is not None and spec.loader is not None
            module = importlib.util.module_from_spec(spec)
            sys.modules["candidate"] = module
            spec.loader.exec_module(module)
        except BaseException as exc:  # noqa: BLE001 - any failure to import is the candidate's compile error
            return {"ok": False, "kind": "import", "error": _tb(exc)}
        fn = getattr(module, msg.get("entry") or "run", None)
        if not callable(fn):
            return {"ok": False, "kind": "import", "error": f"{msg.get('entry') or 'run'} is not a function"}
        self.run = fn
        return {"ok": True}

    # -- helpers -------------------------------------------------------------------------------------------------
    def _workload(self, msg: dict[str, Any]) -> Any:
        return self.task.workload(msg["workload"])

    def _inputs(self, workload: Any, seed: int) -> dict[str, Any]:
        from ksearch.tasks.inputs import make_inputs

        return make_inputs(self.task, workload, seed)

    def _poison(self, workload: Any) -> None:
        """Leave NaN in freed buffers of the outputs' sizes, so a kernel that writes nothing cannot return a stale
        answer that the allocator happened to keep."""
        mx = self.mx
        junk = []
        for spec in self.task.outputs:
            shape = spec.resolved_shape(workload)
            dtype = getattr(mx, spec.resolved_dtype(workload))
            junk.append(mx.full(shape, float("nan"), dtype=dtype))
        self._eval(junk)
        del junk

    def _sync(self) -> None:
        if self._synchronize is not None:
            self._synchronize()

    def _as_tuple(self, out: Any) -> tuple[Any, ...]:
        return tuple(out) if isinstance(out, (tuple, list)) else (out,)

    # -- operations ----------------------------------------------------------------------------------------------
    def reference(self, msg: dict[str, Any]) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
        from ksearch.harness.digest import digest_inputs, to_numpy

        mx = self.mx
        w = self._workload(msg)
        inputs = self._inputs(w, int(msg["seed"]))
        if int(msg.get("shift", 0)):  # a timed call's input set (spot checks)
            inputs = rotated(mx, inputs, int(msg["shift"]), self.task.generator is None)
            self._eval(list(inputs.values()))
        digests = digest_inputs(inputs)
        copies = {k: mx.array(v).astype(mx.float32) for k, v in inputs.items()}
        outs = self._as_tuple(self.task.reference(copies, **dict(w.params)))
        self._eval(outs)
        arrays = {f"out{i}": to_numpy(o.astype(mx.float32)) for i, o in enumerate(outs)}
        return {"ok": True, "digests": digests}, arrays

    def trial(self, msg: dict[str, Any]) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
        from ksearch.harness.digest import digest_inputs, to_numpy

        mx = self.mx
        w = self._workload(msg)
        self._poison(w)
        inputs = self._inputs(w, int(msg["seed"]))
        before = digest_inputs(inputs)
        outs = self._as_tuple(self.run(**inputs, **dict(w.params)))
        if not all(isinstance(o, mx.array) for o in outs):
            kinds = ", ".join(type(o).__name__ for o in outs)
            return {"ok": True, "bad_type": f"run() returned {kinds}, not MLX arrays"}, {}
        self._eval(outs)
        self._sync()
        after = digest_inputs(inputs)
        dtypes = [str(o.dtype).replace("mlx.core.", "") for o in outs]
        arrays = {f"out{i}": to_numpy(o) for i, o in enumerate(outs)}
        return {"ok": True, "before": before, "after": after, "dtypes": dtypes}, arrays

    def prepare(self, msg: dict[str, Any]) -> dict[str, Any]:
        w = self._workload(msg)
        self.params = dict(w.params)
        self.pool = []
        self._eval([])
        self.pool = [self._timing_set(w, int(s)) for s in msg["seeds"]]
        # Warm-up calls are the same calls as timed ones: nothing distinguishes them.
        # At least `warmup` calls and a quarter second: the first calls of a shape build MLX's graph caches and JIT
        # kernels, and a cold start measured against a warm baseline showed a 1.2x phantom speedup of a kernel over
        # itself.
        t = self._calls(self._views(0, int(msg.get("warmup", 2))))
        while sum(t) < 0.25 and len(t) < WARMUP_MAX_CALLS // 2:
            t += self._calls(self._views(len(t), min(max(1, len(t)), WARMUP_MAX_CALLS - len(t))))
        return {"ok": True, "estimate": float(np.median(t)) if t else 0.0}

    def _timing_set(self, workload: Any, seed: int) -> dict[str, tuple[Any, tuple[int, ...], int]]:
        """One pool set, each tensor stored flat with a short tail that repeats its start, so that a view at an offset
        is a rotation of the tensor (see _fresh)."""
        mx = self.mx
        # A task's own generator may build inputs with structure (sorted, indices, ...) that a rotation breaks: those
        # get fresh objects over unrotated buffers only.
        rotate = self.task.generator is None
        out = {}
        for name, v in self._inputs(workload, seed).items():
            flat = v.reshape(-1)
            step = _step(v, rotate)
            extra = step * (_SHIFTS - 1)
            if not extra or not flat.size:
                tail = flat[:0]
            elif flat.size >= extra:
                tail = flat[:extra]
            else:  # a tensor shorter than the longest rotation: repeat it
                tail = mx.concatenate([flat] * -(-extra // flat.size))[:extra]
            out[name] = (mx.concatenate([flat, tail]), tuple(v.shape), step)
        self._eval([b for b, _, _ in out.values()])
        return out

    def _fresh(self, i: int) -> dict[str, Any]:
        """The inputs of timed call i: pool set i % P, rotated by a multiple of 256 bytes that changes every pass
        through the pool, as new array objects over the pool's buffers (a slice and a reshape copy nothing).
        The pool is reused many times per batch. Handing back the same objects let a candidate memoise its output
        per input object and skip the work in every timed call after the first pass (reproduced: a 500x "speedup");
        handing back the same contents would let it memoise on a fingerprint or on the buffer's address. Now no two
        calls among P * 256 see the same contents or addresses. Rotated inputs stay valid inputs: the built-in
        generators draw every element independently from one distribution."""
        n_sets = len(self.pool)
        shift = (i // n_sets) % _SHIFTS
        views = {}
        for name, (buf, shape, step) in self.pool[i % n_sets].items():
            size = 1
            for d in shape:
                size *= d
            off = shift * step
            views[name] = buf[off : off + size].reshape(shape)
        return views

    def _call(self, inputs: dict[str, Any]) -> tuple[float, Any]:
        t0 = _clock()
        out = self.run(**inputs, **self.params)
        self._eval(out)
        self._sync()
        return _clock() - t0, out

    def _stop_requested(self) -> bool:
        """Whether the parent has ended the batch. It does so at a moment of its choosing, so a candidate cannot
        know which timed calls end up in the ring that the parent checks."""
        ready, _, _ = select.select([self.sock], [], [], 0)
        if not ready:
            return False
        msg, _ = protocol.recv(self.sock)
        return msg.get("op") == "stop"

    def _views(self, start: int, n: int) -> list[dict[str, Any]]:
        views = [self._fresh(start + i) for i in range(n)]
        self._eval([v for d in views for v in d.values()])
        return views

    def _calls(self, views: list[dict[str, Any]], stoppable: bool = False) -> list[float]:
        times = []
        self.ring.clear()
        for i in range(len(views)):
            inputs = views[i]
            views[i] = {}  # a call's inputs live no longer than the call
            t, out = self._call(inputs)
            times.append(t)
            self.ring.append(out)
            del out
            if stoppable and self._stop_requested():
                break
        return times

    def stage(self, msg: dict[str, Any]) -> dict[str, Any]:
        """Build the next batch's input views before the parent starts its clock: a few microseconds per input and
        call that would otherwise sit inside the parent's window, outside the worker's, and lower the coverage that
        the parent demands (timing.MIN_COVERAGE) for fast GPU kernels."""
        self.staged = (int(msg.get("offset", 0)), self._views(int(msg.get("offset", 0)), int(msg["n"])))
        return {"ok": True}

    def go(self, msg: dict[str, Any]) -> dict[str, Any]:
        start, n = int(msg.get("offset", 0)), int(msg["n"])
        staged, self.staged = self.staged, None
        views = staged[1] if staged is not None and staged[0] == start and len(staged[1]) == n else None
        return {"ok": True, "times": self._calls(views if views is not None else self._views(start, n), True)}

    def spot(self, msg: dict[str, Any]) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
        """Ship one of the last timed calls' outputs (index counted from the oldest kept) for the parent to judge."""
        from ksearch.harness.digest import to_numpy

        mx = self.mx
        ring = list(self.ring)
        index = int(msg["index"])
        if not 0 <= index < len(ring):
            return {"ok": False, "kind": "protocol", "error": f"no timed call {index} kept"}, {}
        outs = self._as_tuple(ring[index])
        if not all(isinstance(o, mx.array) for o in outs):
            kinds = ", ".join(type(o).__name__ for o in outs)
            return {"ok": True, "bad_type": f"a timed run() returned {kinds}, not MLX arrays"}, {}
        dtypes = [str(o.dtype).replace("mlx.core.", "") for o in outs]
        return {"ok": True, "dtypes": dtypes}, {f"out{i}": to_numpy(o) for i, o in enumerate(outs)}

    def release(self, _msg: dict[str, Any]) -> dict[str, Any]:
        self.pool = []
        self.staged = None
        self.ring.clear()
        return {"ok": True}

    def serve(self) -> None:
        while True:
            try:
                msg, _ = protocol.recv(self.sock)
            except (protocol.ProtocolError, OSError):
                return
            op = msg.get("op")
            if op == "exit":
                return
            if op == "stop":  # arrived after the batch had ended by itself: nothing to answer
                continue
            arrays: dict[str, np.ndarray] = {}
            try:
                if op == "init":
                    reply = self.init(msg)
                elif op == "reference":
                    reply, arrays = self.reference(msg)
                elif op == "trial":
                    reply, arrays = self.trial(msg)
                elif op == "prepare":
                    reply = self.prepare(msg)
                elif op == "spot":
                    reply, arrays = self.spot(msg)
                elif op == "stage":
                    reply = self.stage(msg)
                elif op == "go":
                    reply = self.go(msg)
                elif op == "release":
                    reply = self.release(msg)
                else:
                    reply = {"ok": False, "kind": "protocol", "error": f"unknown op {op!r}"}
            except BaseException as exc:  # noqa: BLE001 - report every failure of the code under test
                if isinstance(exc, KeyboardInterrupt):
                    raise
                reply = {"ok": False, "kind": "exception", "error": _tb(exc)}
                arrays = {}
            _send(self.sock, reply, arrays)


def _tb(exc: BaseException) -> str:
    text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    return text[-4000:]


def main() -> None:
    _die_with_parent()
    fd = int(os.environ["KSEARCH_WORKER_FD"])
    sock = socket.socket(fileno=fd)
    Worker(sock).serve()
    sys.stdout.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
