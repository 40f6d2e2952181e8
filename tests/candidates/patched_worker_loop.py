# Bad candidate, aware of the harness's internals: replaces the worker's batch of timed calls (Worker.go) in its own
# process. The new loop does no work for the timed calls; when the parent stops the batch it computes honest outputs
# for just the calls whose outputs the worker keeps for checks, and reports per-call times that add up to the real wall
# clock (so the parent's clock agrees). It sends no commitments. Expected: caught (every timed call must be committed
# to as it ends).
import socket
import sys
import time

import mlx.core as mx

from ksearch.harness import protocol

_W = getattr(sys.modules.get("__main__"), "Worker", None)
_clock = time.perf_counter


def _fake_go(self, msg):
    start, n, batch = int(msg["offset"]), int(msg["n"]), int(msg["batch"])
    t0 = _clock()
    self.ring.clear()
    done = 0
    for _ in range(n):
        done += 1
        time.sleep(1e-4)
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
