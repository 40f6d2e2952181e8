# Bad candidate, aware of the harness's internals: replaces the worker's batch of timed calls (Worker.go) and commits
# to every timed call as the parent expects, but with the fingerprint of an output it never computed (zeros, worked
# out once); when the parent stops the batch it computes honest outputs for the calls the worker keeps for checks, and
# reports per-call times that add up to the wall clock. Expected: wrong_answer (the outputs it shows for the checked
# call are not the ones it committed to).
import socket
import sys
import time

import mlx.core as mx

from ksearch.harness import protocol
from ksearch.harness.digest import fingerprint_mx

_W = getattr(sys.modules.get("__main__"), "Worker", None)
_clock = time.perf_counter
_lanes = {}


def _fake_go(self, msg):
    start, n, batch = int(msg["offset"]), int(msg["n"]), int(msg["batch"])
    t0 = _clock()
    self.ring.clear()
    if not _lanes:
        shape = self.pool.sets[0]["x"].shape
        d = fingerprint_mx((mx.zeros(shape, dtype=self.pool.sets[0]["x"].dtype),))
        _lanes["zeros"] = d.tolist()
    done = 0
    for k in range(n):
        done += 1
        time.sleep(1e-4)
        socket.socket.sendall(self.sock, protocol.COMMIT.pack(protocol.COMMIT_MAGIC, start + k, *_lanes["zeros"]))
        if self._stop_requested():
            break
    for call in range(start + max(0, done - self.ring.maxlen), start + done):
        out = self.run(**self.pool.take(batch, call), **self.params)
        mx.eval(out)
        self.ring.append((call, (out,)))
    wall = _clock() - t0
    socket.socket.sendall(self.sock, protocol.COMMIT.pack(protocol.END_MAGIC, done, 0, 0))
    return {"ok": True, "times": [0.95 * wall / done] * done, "gaps": [0.0] * done, "lead": 0.0}


if _W is not None:
    _W.go = _fake_go


def run(x):
    xf = x.astype(mx.float32)
    e = mx.exp(xf - mx.max(xf, axis=-1, keepdims=True))
    return (e / mx.sum(e, axis=-1, keepdims=True)).astype(x.dtype)
