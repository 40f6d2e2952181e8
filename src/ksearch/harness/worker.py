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
from ksearch.harness.timing import RING, ring_for, run_length

# Captured before any candidate code exists in this process.
_clock = time.perf_counter
_send = protocol.send
_sendall = socket.socket.sendall


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
        self.pool: Any = None
        self.params: dict[str, Any] = {}
        self._eval: Any = None
        self.ring: collections.deque[tuple[int, tuple[Any, ...]]] = collections.deque(maxlen=RING)
        self._bases: dict[tuple[str, int], Any] = {}
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
        if msg.get("emulation") and self.role != "reference":
            # Metal kernels run through the emulation: in place before the candidate, a baseline or a library
            # module of ksearch.kernels is imported, so that each builds its kernels with it, unchanged.
            from ksearch.metalemu.surface import install

            install(str(msg["emulation"]))
        self.task = get_task(msg["task"])
        if self.role != "candidate":
            _no_dumps()
        if self.role == "reference":
            return {"ok": True}
        # The harness's own work in this process (fingerprints, the timing pool) binds the MLX functions it uses
        # now, before any candidate code exists.
        from ksearch.harness import digest, pool  # noqa: F401

        digest.capture_ops()
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

    def _ship(self, outs: tuple[Any, ...]) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
        """Outputs as their exact bits (bfloat16 as uint16 words), with their dtypes; or why they cannot be."""
        from ksearch.harness.digest import raw_bits

        mx = self.mx
        if not all(isinstance(o, mx.array) for o in outs):
            kinds = ", ".join(type(o).__name__ for o in outs)
            return {"ok": True, "bad_type": f"run() returned {kinds}, not MLX arrays"}, {}
        dtypes = [str(o.dtype).replace("mlx.core.", "") for o in outs]
        return {"ok": True, "dtypes": dtypes}, {f"out{i}": raw_bits(o) for i, o in enumerate(outs)}

    # -- operations ----------------------------------------------------------------------------------------------
    def reference(self, msg: dict[str, Any], given: dict[str, np.ndarray] | None = None
                  ) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
        """Reference outputs (float32) for a trial's inputs (seed), or for a timed call's (seed, sets, batch, call),
        with `given` in place of the inputs it names (a chained call's input, Task.chain)."""
        from ksearch.harness.digest import digest_inputs_mx, to_numpy
        from ksearch.harness.pool import call_inputs

        mx = self.mx
        w = self._workload(msg)
        if msg.get("call") is not None:
            # The generator's inputs of a timing pool are kept: the calls checked from one pool share them.
            key = (w.name, int(msg["seed"]))
            if key not in self._bases:
                self._bases.clear()
                self._bases[key] = self._inputs(w, key[1]) if self.task.generator is None else None
            inputs = call_inputs(self.task, w, key[1], int(msg["sets"]), int(msg["batch"]), int(msg["call"]),
                                 self._bases[key])
            for name, value in (given or {}).items():  # a chained call's input: the previous call's output
                inputs[name] = mx.array(value).astype(inputs[name].dtype)
        else:
            inputs = self._inputs(w, int(msg["seed"]))
        digests = digest_inputs_mx(inputs)
        copies = {k: v.astype(mx.float32) for k, v in inputs.items()}
        outs = self._as_tuple(self.task.reference(copies, **dict(w.params)))
        self._eval(outs)
        arrays = {f"out{i}": to_numpy(o.astype(mx.float32)) for i, o in enumerate(outs)}
        return {"ok": True, "digests": digests}, arrays

    def trial(self, msg: dict[str, Any]) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
        from ksearch.harness.digest import digest_inputs_mx

        w = self._workload(msg)
        t0 = _clock()
        self._poison(w)
        inputs = self._inputs(w, int(msg["seed"]))
        before = digest_inputs_mx(inputs)
        t1 = _clock()
        outs = self._as_tuple(self.run(**inputs, **dict(w.params)))
        if all(isinstance(o, self.mx.array) for o in outs):
            self._eval(outs)
            self._sync()
        t2 = _clock()
        after = digest_inputs_mx(inputs)
        reply, arrays = self._ship(outs)
        # For diagnosis (eval-phases); the parent never bases a verdict on what this process says.
        seconds = {"inputs and fingerprints": t1 - t0 + _clock() - t2, "call": t2 - t1}
        return {**reply, "before": before, "after": after, "seconds": seconds}, arrays

    def prepare(self, msg: dict[str, Any]) -> dict[str, Any]:
        """Build the timing pool of one workload (see pool.py): sets of inputs laid out as callers pass them."""
        from ksearch.harness.pool import TimingPool

        w = self._workload(msg)
        self.params = dict(w.params)
        self.pool = None
        self.ring.clear()
        self.pool = TimingPool(self.task, w, int(msg["seed"]), int(msg["sets"]))
        return {"ok": True}

    def _stop_requested(self) -> bool:
        """Whether the parent has ended the batch. It does so at a moment of its choosing, so a candidate cannot
        know which timed calls end up in the ring that the parent checks."""
        ready, _, _ = select.select([self.sock], [], [], 0)
        if not ready:
            return False
        msg, _ = protocol.recv(self.sock)
        return msg.get("op") == "stop"

    def go(self, msg: dict[str, Any]) -> dict[str, Any]:
        """One batch of timed calls, from call `offset` on, until the parent's stop or `n` calls, in runs of at most
        `run` calls (timing.RUN).

        A run: its calls' inputs made together (each call its own pool set, stamped anew) before its clock starts;
        then its calls queued one after the other, as a caller's code queues a model's layers (for a chained task,
        Task.chain, each call after the first taking the previous call's output as an input), and their outputs
        evaluated together and the device synchronised inside one clock (each call's time is the run's mean); after
        the run, outside the clock, a fingerprint of each call's outputs computed on the device and sent to the parent
        at once (a commitment: the parent later names one of the last calls before its stop, takes that call's outputs
        from the ring and checks them against the commitment and the reference). The time outside the clocks is
        reported too (`gaps`, per call: from its end to the next call's start, 0 inside a run), so the parent can
        bound what happens there, with the runs' lengths (`runs`)."""
        from ksearch.harness.digest import fingerprints_mx

        assert self.pool is not None, "prepare first"
        start, n, batch = int(msg["offset"]), int(msg["n"]), int(msg["batch"])
        asked = max(1, int(msg.get("run") or 1))
        run = run_length(asked, len(self.pool.sets))
        if self.ring.maxlen != ring_for(asked):  # the calls the parent may name: twice the run it asked for
            self.ring = collections.deque(maxlen=ring_for(asked))
        times: list[float] = []
        gaps: list[float] = []
        runs: list[int] = []
        chain = self.task.chain
        self.ring.clear()
        t_begin = _clock()
        lead, last_end = 0.0, 0.0
        try:
            while len(times) < n:
                first = start + len(times)
                r = min(run, n - len(times))
                inputs: list[dict[str, Any] | None] = [self.pool.take(batch, first + j) for j in range(r)]
                self._eval([v for x in inputs if x for v in x.values()])
                t0 = _clock()
                if times:
                    gaps.append(t0 - last_end)
                else:
                    lead = t0 - t_begin
                queued: list[tuple[Any, ...]] = []
                for j in range(r):
                    x, inputs[j] = inputs[j], None
                    assert x is not None
                    if j and chain is not None:  # the previous call's output as this call's input (Task.chain)
                        x[chain[0]] = queued[-1][chain[1]]
                    queued.append(self._as_tuple(self.run(**x, **self.params)))
                    del x
                self._eval(queued)
                self._sync()
                last_end = _clock()
                # The run's calls were queued and evaluated together: each is the run's mean, nothing between them.
                each = (last_end - t0) / r
                for j, outs in enumerate(queued):
                    self.ring.append((first + j, outs))
                    times.append(each)
                    if j:
                        gaps.append(0.0)
                del queued
                runs.append(r)
                prints = fingerprints_mx([outs for _, outs in list(self.ring)[-r:]])
                self._eval(prints)
                for j, fp in enumerate(prints.tolist()):
                    _sendall(self.sock, protocol.COMMIT.pack(protocol.COMMIT_MAGIC, first + j, *fp))
                del prints
                if self._stop_requested():
                    break
            if times:
                gaps.append(_clock() - last_end)
        except BaseException as exc:  # noqa: BLE001 - the candidate's failure, reported after the end record
            if isinstance(exc, KeyboardInterrupt):
                raise
            _sendall(self.sock, protocol.COMMIT.pack(protocol.END_MAGIC, len(times), 0, 0))
            return _failure(exc)
        _sendall(self.sock, protocol.COMMIT.pack(protocol.END_MAGIC, len(times), 0, 0))
        return {"ok": True, "times": times, "gaps": gaps, "runs": runs, "lead": lead}

    def spot(self, msg: dict[str, Any]) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
        """Ship one of the last timed calls' outputs, named by its call index, for the parent to judge."""
        call = int(msg["call"])
        for index, outs in self.ring:
            if index == call:
                return self._ship(outs)
        return {"ok": False, "kind": "protocol", "error": f"timed call {call} is not kept"}, {}

    def profile(self, msg: dict[str, Any]) -> dict[str, Any]:
        """The calls a profiler records (ksearch.harness.profile): `warmup` calls of the candidate on one input set
        (its compiles and caches happen there), then `calls` calls between cuProfilerStart and cuProfilerStop, so
        that `ncu --profile-from-start off` sees those calls' kernels alone. Nothing here is timed or judged."""
        w = self._workload(msg)
        inputs = self._inputs(w, int(msg["seed"]))

        def call() -> None:
            outs = self._as_tuple(self.run(**inputs, **dict(w.params)))
            self._eval([o for o in outs if isinstance(o, self.mx.array)])
            self._sync()

        for _ in range(int(msg.get("warmup", 2))):
            call()
        bracket = _profiler_api()
        if bracket is not None:
            bracket[0]()
        try:
            for _ in range(int(msg.get("calls", 1))):
                call()
        finally:
            if bracket is not None:
                bracket[1]()
        return {"ok": True, "bracketed": bracket is not None}

    def release(self, _msg: dict[str, Any]) -> dict[str, Any]:
        if self.pool is not None:
            self.pool.release()
        self.pool = None
        self.ring.clear()
        return {"ok": True}

    def serve(self) -> None:
        while True:
            try:
                msg, given = protocol.recv(self.sock)
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
                    reply, arrays = self.reference(msg, given)
                elif op == "trial":
                    reply, arrays = self.trial(msg)
                elif op == "prepare":
                    reply = self.prepare(msg)
                elif op == "spot":
                    reply, arrays = self.spot(msg)
                elif op == "go":
                    reply = self.go(msg)
                elif op == "release":
                    reply = self.release(msg)
                elif op == "profile":
                    reply = self.profile(msg)
                else:
                    reply = {"ok": False, "kind": "protocol", "error": f"unknown op {op!r}"}
            except BaseException as exc:  # noqa: BLE001 - report every failure of the code under test
                if isinstance(exc, KeyboardInterrupt):
                    raise
                reply = _failure(exc)
                arrays = {}
            _send(self.sock, reply, arrays)


def _profiler_api() -> tuple[Any, Any] | None:
    """(start, stop) of the CUDA profiler API: cudaProfilerStart/Stop of the CUDA runtime this process has loaded
    (MLX's), else cuProfilerStart/Stop of the driver; None where neither library loads (no NVIDIA driver)."""
    names: set[str] = set()
    with contextlib.suppress(OSError), open("/proc/self/maps") as maps:
        names = {line.split()[-1] for line in maps if "libcudart.so" in line and line.split()[-1].startswith("/")}
    for name in sorted(names):
        with contextlib.suppress(OSError, AttributeError):
            lib = ctypes.CDLL(name)
            return lib.cudaProfilerStart, lib.cudaProfilerStop
    with contextlib.suppress(OSError, AttributeError):
        lib = ctypes.CDLL("libcuda.so.1")
        return lib.cuProfilerStart, lib.cuProfilerStop
    return None


def _failure(exc: BaseException) -> dict[str, Any]:
    """The reply for an exception in the code under test; an error that says whether it is a compile or a run-time
    failure (the Metal emulation's, `.status`) passes that on, as its message alone: it names the kernel and the
    candidate's line already, where a traceback would show the harness's and the emulation's frames."""
    status = getattr(exc, "status", None)
    if status in ("compile_error", "runtime_error"):
        return {"ok": False, "kind": "exception", "error": f"{type(exc).__name__}: {exc}"[-4000:], "status": status}
    return {"ok": False, "kind": "exception", "error": _tb(exc)}


def _tb(exc: BaseException) -> str:
    text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    return text[-4000:]


def _preload() -> None:
    """What every role imports, loaded before the init arrives (trusted code only; no candidate exists yet): a worker
    spawned ahead of an evaluation spends its import time while the parent is still busy elsewhere."""
    import mlx.core as mx

    import ksearch.harness.digest  # noqa: F401
    import ksearch.harness.pool  # noqa: F401
    import ksearch.tasks  # noqa: F401

    if os.environ.get("KSEARCH_WORKER_DEVICE") == "gpu":
        # The device's context too (CUDA makes it at the first operation), while a spare worker waits for its
        # candidate rather than in its first trial.
        mx.eval(mx.zeros((1,), dtype=mx.float32) + 1)


def main() -> None:
    _die_with_parent()
    fd = int(os.environ["KSEARCH_WORKER_FD"])
    sock = socket.socket(fileno=fd)
    _preload()
    Worker(sock).serve()
    sys.stdout.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
