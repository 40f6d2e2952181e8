"""The parent's side of one batch of timed calls: start it, read the worker's commitments as they arrive, stop it at a
moment of the parent's choosing, and keep what the worker had committed to before the stop."""

from __future__ import annotations

import contextlib
import select
import socket
import subprocess
import time
from dataclasses import dataclass, field
from typing import Any

from ksearch.harness import protocol
from ksearch.harness.process import WorkerDied, WorkerProcess


@dataclass
class Batch:
    first: int  # index of the batch's first call
    batch_key: int  # the key of the batch's input stamps (pool.py)
    elapsed: float  # the parent's clock, from sending `go` to the reply
    reply: dict[str, Any]
    commits: list[str] = field(default_factory=list)  # fingerprints of calls first, first + 1, ...
    before_stop: int = 0  # how many of them had arrived when the parent sent its stop
    probe: bool = False  # one call a run, each synchronised (timing.PROBE_BATCHES): read for calls of two kinds only

    @property
    def times(self) -> list[float]:
        return list(self.reply.get("times") or [])

    @property
    def gaps(self) -> list[float]:
        return list(self.reply.get("gaps") or [])

    @property
    def runs(self) -> list[int]:
        """The lengths of the batch's runs (timing.RUN); one call a run when the worker reported none."""
        runs = self.reply.get("runs")
        if isinstance(runs, list) and all(isinstance(r, int) for r in runs):
            return list(runs)
        return [1] * len(self.times)


def _fail(worker: WorkerProcess, exc: BaseException) -> WorkerDied:
    with contextlib.suppress(subprocess.TimeoutExpired):
        worker.proc.wait(timeout=2)
    if worker.proc.poll() is None:
        worker.kill()
        return WorkerDied(f"broke the protocol: {exc}", kind="protocol")
    return WorkerDied(worker.death_message(), kind="crash")


def run_batch(worker: WorkerProcess, first: int, n_max: int, batch_key: int, deadline: float,
              stop_at: float | None, run: int = 1) -> Batch:
    """Run one batch, in runs of at most `run` calls; `stop_at` (time.monotonic()) is when the parent stops it, None
    to let it run its n_max calls.

    Raises WorkerDied like WorkerProcess.request; a record out of order is a protocol error."""
    sock = worker.sock
    poll = worker._poll  # liveness and the memory cap while waiting, as every request does
    batch = Batch(first=first, batch_key=batch_key, elapsed=0.0, reply={})
    stopped = False
    size = protocol.COMMIT.size
    t0 = time.perf_counter()
    try:
        protocol.send(sock, {"op": "go", "offset": first, "n": n_max, "batch": batch_key, "run": run})
        ended = False
        last_poll = time.monotonic()
        while not ended:
            now = time.monotonic()
            if now >= deadline:
                raise protocol.Deadline("timed out waiting for the worker")
            if now - last_poll > 0.2:  # records may stream in without a pause: liveness and memory all the same
                poll()
                last_poll = now
            if stop_at is not None and not stopped and now >= stop_at:
                # Whatever arrived before the stop is binding; what comes after it may have been made up after the
                # worker learnt which calls are the last ones.
                ended = _read_records(sock, batch, size, block=False)
                batch.before_stop = len(batch.commits)
                stopped = True
                if not ended:
                    protocol.send(sock, {"op": "stop"})
                continue
            wait = min(0.2, deadline - now)
            if not stopped and stop_at is not None:
                wait = min(wait, max(0.0, stop_at - now))
            ready, _, _ = select.select([sock], [], [], wait)
            if not ready:
                poll()
                continue
            ended = _read_records(sock, batch, size, block=True)
        if not stopped:  # the batch ended by itself: every commitment came before any stop
            batch.before_stop = len(batch.commits)
        reply, _ = protocol.recv(sock, deadline=deadline, poll=poll)
    except protocol.Deadline as exc:
        worker.kill()
        raise WorkerDied("timed out", kind="timeout") from exc
    except (protocol.ProtocolError, OSError) as exc:
        raise _fail(worker, exc) from exc
    batch.elapsed = time.perf_counter() - t0
    batch.reply = reply
    return batch


def _read_records(sock: socket.socket, batch: Batch, size: int, block: bool) -> bool:
    """Consume the whole commitment records waiting on the socket (never past the end record, so that the reply frame
    stays for protocol.recv). True once the end record is read."""
    try:
        data = sock.recv(1 << 16, socket.MSG_PEEK | (0 if block else socket.MSG_DONTWAIT))
    except BlockingIOError:
        return False
    if not data:
        raise protocol.ProtocolError("worker closed the channel")
    usable = len(data) // size * size
    consumed = 0
    ended = False
    for off in range(0, usable, size):
        magic, index, a, b = protocol.COMMIT.unpack_from(data, off)
        consumed = off + size
        if magic == protocol.END_MAGIC:
            ended = True
            break
        if magic != protocol.COMMIT_MAGIC or index != batch.first + len(batch.commits):
            raise protocol.ProtocolError("timed calls' commitment records out of order")
        batch.commits.append(f"{a:08x}{b:08x}")
    if consumed:
        got = 0
        while got < consumed:  # the bytes were peeked, so they are there
            chunk = sock.recv(consumed - got)
            if not chunk:
                raise protocol.ProtocolError("worker closed the channel")
            got += len(chunk)
    return ended
