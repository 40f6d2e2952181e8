# Bad candidate, aware of the harness's internals: replaces the worker's batch of timed calls (Worker.go) with one
# that does all the work and commits honestly, but keeps the clock running only while run() builds its lazy graph:
# the graph is evaluated after the clock stops, between calls. Expected: no gain (the time between calls is bounded
# by what the trusted baseline worker needs there, and what exceeds it counts as the call's).
import socket
import sys
import time

import mlx.core as mx

from ksearch.harness import protocol
from ksearch.harness.digest import fingerprint_mx

_W = getattr(sys.modules.get("__main__"), "Worker", None)
_clock = time.perf_counter


def _lazy_go(self, msg):
    start, n, batch = int(msg["offset"]), int(msg["n"]), int(msg["batch"])
    times, gaps = [], []
    self.ring.clear()
    for k in range(n):
        inputs = self.pool.take(batch, start + k)
        mx.eval(list(inputs.values()))
        t0 = _clock()
        out = self.run(**inputs, **self.params)
        t1 = _clock()
        mx.eval(out)
        self.ring.append((start + k, (out,)))
        lanes = fingerprint_mx((out,)).tolist()
        socket.socket.sendall(self.sock, protocol.COMMIT.pack(protocol.COMMIT_MAGIC, start + k, *lanes))
        times.append(t1 - t0)
        stop = self._stop_requested()
        gaps.append(_clock() - t1)
        if stop:
            break
    socket.socket.sendall(self.sock, protocol.COMMIT.pack(protocol.END_MAGIC, len(times), 0, 0))
    return {"ok": True, "times": times, "gaps": gaps, "lead": 0.0}


if _W is not None:
    _W.go = _lazy_go


def run(x):
    xf = x.astype(mx.float32)
    e = mx.exp(xf - mx.max(xf, axis=-1, keepdims=True))
    return (e / mx.sum(e, axis=-1, keepdims=True)).astype(x.dtype)
