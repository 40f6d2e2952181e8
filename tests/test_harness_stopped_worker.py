"""A worker stopped with SIGSTOP (any process of this user can send it) is resumed instead of holding the judge."""

from __future__ import annotations

import os
import signal
import time

from ksearch.harness.process import start


def test_stopped_reference_worker_is_resumed() -> None:
    w, reply = start("reference", "softmax", "cpu", 1 << 40, time.monotonic() + 60)
    try:
        assert reply.get("ok")
        os.kill(w.proc.pid, signal.SIGSTOP)
        t0 = time.monotonic()
        out, arrays = w.request({"op": "reference", "workload": "cpu_128x4096_f32", "seed": 5}, time.monotonic() + 30)
        assert out.get("ok")
        assert arrays
        assert w.stops_seen >= 1
        assert time.monotonic() - t0 < 10
    finally:
        w.close()
