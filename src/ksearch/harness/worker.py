"""The worker process: builds inputs, runs a candidate (or the reference, or a baseline), ships raw results back.

Roles:
- candidate: untrusted. Loads the candidate file after the clock and the channel are captured and the forbidden-API
  tripwires are installed. Anything it reports is checked by the parent.
- reference: trusted, never loads candidate code. Computes reference outputs in float32 (TF32 disabled by the parent).
- baseline: trusted. Loads a built-in baseline source and times it with the same protocol as candidates.

Run as `python -m ksearch.harness.worker`; the parent passes the channel's file descriptor in KSEARCH_WORKER_FD.
"""

from __future__ import annotations

import ctypes
import importlib.util
import os
import signal
import socket
import sys
import threading
import time
import traceback
from typing import Any

import numpy as np

from ksearch.harness import protocol

# Captured before any candidate code exists in this process.
_clock = time.perf_counter
_send = protocol.send


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


class Worker:
    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.role = ""
        self.task: Any = None
        self.run: Any = None
        self.mx: Any = None
        self.pool: list[dict[str, Any]] = []
        self.params: dict[str, Any] = {}

    # -- setup ---------------------------------------------------------------------------------------------------
    def init(self, msg: dict[str, Any]) -> dict[str, Any]:
        import mlx.core as mx

        from ksearch.tasks import get_task

        self.mx = mx
        self.role = msg["role"]
        if msg.get("device") == "cpu":
            mx.set_default_device(mx.cpu)
        self.task = get_task(msg["task"])
        if self.role == "reference":
            return {"ok": True}
        if self.role == "candidate":
            from ksearch.harness import guard

            guard.install(tuple(msg.get("forbidden", ())), msg.get("guard_fd"))
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
        mx.eval(junk)
        del junk

    def _sync(self) -> None:
        mx = self.mx
        if hasattr(mx, "synchronize"):
            mx.synchronize()

    def _as_tuple(self, out: Any) -> tuple[Any, ...]:
        return tuple(out) if isinstance(out, (tuple, list)) else (out,)

    # -- operations ----------------------------------------------------------------------------------------------
    def reference(self, msg: dict[str, Any]) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
        from ksearch.harness.digest import digest_inputs, to_numpy

        mx = self.mx
        w = self._workload(msg)
        inputs = self._inputs(w, int(msg["seed"]))
        digests = digest_inputs(inputs)
        copies = {k: mx.array(v).astype(mx.float32) for k, v in inputs.items()}
        outs = self._as_tuple(self.task.reference(copies, **dict(w.params)))
        mx.eval(outs)
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
        mx.eval(outs)
        self._sync()
        after = digest_inputs(inputs)
        dtypes = [str(o.dtype).replace("mlx.core.", "") for o in outs]
        arrays = {f"out{i}": to_numpy(o) for i, o in enumerate(outs)}
        return {"ok": True, "before": before, "after": after, "dtypes": dtypes}, arrays

    def prepare(self, msg: dict[str, Any]) -> dict[str, Any]:
        w = self._workload(msg)
        self.params = dict(w.params)
        self.pool = []
        self.mx.eval([])
        self.pool = [self._inputs(w, int(s)) for s in msg["seeds"]]
        # Warm-up calls are the same calls as timed ones: nothing distinguishes them.
        t = []
        for i in range(int(msg.get("warmup", 2))):
            t.append(self._call(i))
        return {"ok": True, "estimate": float(np.median(t)) if t else 0.0}

    def _call(self, i: int) -> float:
        mx = self.mx
        inputs = self.pool[i % len(self.pool)]
        t0 = _clock()
        out = self.run(**inputs, **self.params)
        mx.eval(out)
        self._sync()
        return _clock() - t0

    def go(self, msg: dict[str, Any]) -> dict[str, Any]:
        start = int(msg.get("offset", 0))
        times = [self._call(start + i) for i in range(int(msg["n"]))]
        return {"ok": True, "times": times}

    def release(self, _msg: dict[str, Any]) -> dict[str, Any]:
        self.pool = []
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
