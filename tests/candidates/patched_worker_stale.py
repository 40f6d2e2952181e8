# Bad candidate, aware of the harness's internals: replaces the worker's batch of timed calls (Worker.go) with one
# that does the work of one call in 16 and hands back the last computed output for the others, committing honestly
# to what it hands back and timing honestly what it does. Expected: wrong_answer (a checked timed call's output is
# stale for its inputs, which are new for every call).
import socket
import sys
import time

import mlx.core as mx

from ksearch.harness import protocol
from ksearch.harness.digest import fingerprint_mx

_W = getattr(sys.modules.get("__main__"), "Worker", None)
_clock = time.perf_counter


def _stale_go(self, msg):
    start, n, batch = int(msg["offset"]), int(msg["n"]), int(msg["batch"])
    times, gaps = [], []
    self.ring.clear()
    last = None
    for k in range(n):
        inputs = self.pool.take(batch, start + k)
        mx.eval(list(inputs.values()))
        t0 = _clock()
        if last is None or (start + k) % 16 == 0:
            last = self.run(**inputs, **self.params)
            mx.eval(last)
        t1 = _clock()
        self.ring.append((start + k, (last,)))
        lanes = fingerprint_mx((last,)).tolist()
        socket.socket.sendall(self.sock, protocol.COMMIT.pack(protocol.COMMIT_MAGIC, start + k, *lanes))
        times.append(t1 - t0)
        stop = self._stop_requested()
        gaps.append(_clock() - t1)
        if stop:
            break
    socket.socket.sendall(self.sock, protocol.COMMIT.pack(protocol.END_MAGIC, len(times), 0, 0))
    return {"ok": True, "times": times, "gaps": gaps, "lead": 0.0}


if _W is not None:
    _W.go = _stale_go


def run(x):
    xf = x.astype(mx.float32)
    e = mx.exp(xf - mx.max(xf, axis=-1, keepdims=True))
    return (e / mx.sum(e, axis=-1, keepdims=True)).astype(x.dtype)
