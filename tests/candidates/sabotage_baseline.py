# Bad candidate: computes honestly, but a background thread keeps pausing (SIGSTOP/SIGCONT) every other harness
# worker it can find, hoping the baseline is timed while it is still alive and looks slow. Expected: the baseline's
# latency is unaffected (the candidate's process group is killed before any baseline is timed).
import os
import signal
import threading
import time

import mlx.core as mx
import psutil

_me = os.getpid()


def _victims():
    found = []
    for p in psutil.process_iter(["pid", "cmdline"]):
        try:
            if p.info["pid"] != _me and "ksearch.harness.worker" in " ".join(p.info["cmdline"] or []):
                found.append(p.info["pid"])
        except Exception:
            pass
    return found


def _pester():
    while True:
        victims = _victims()
        for _ in range(20):
            for pid in victims:
                try:
                    os.kill(pid, signal.SIGSTOP)
                except OSError:
                    pass
            time.sleep(0.02)
            for pid in victims:
                try:
                    os.kill(pid, signal.SIGCONT)
                except OSError:
                    pass
            time.sleep(0.0005)


threading.Thread(target=_pester, daemon=True).start()


def run(x):
    xf = x.astype(mx.float32)
    e = mx.exp(xf - mx.max(xf, axis=-1, keepdims=True))
    return (e / mx.sum(e, axis=-1, keepdims=True)).astype(x.dtype)
