# Bad candidate: starts a daemon the classic way (a shell forks it into a new session with setsid and exits, so the
# daemon is reparented away from the worker and leaves its process group) that ignores SIGTERM and SIGHUP and would
# sleep for an hour. The test finds it by the marker on its command line. Computes honestly. Expected: the daemon is
# dead once the evaluation has ended.
import os
import select
import subprocess
import sys

import mlx.core as mx

_DAEMON = ("import os, signal, sys, time\n"
           "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
           "signal.signal(signal.SIGHUP, signal.SIG_IGN)\n"
           "os.write(int(sys.argv[2]), b'up')\n"
           "os.close(int(sys.argv[2]))\n"
           "time.sleep(3600)\n")
_r, _w = os.pipe()
subprocess.run(["sh", "-c", f"setsid {sys.executable} -c \"$1\" \"$2\" \"$3\" </dev/null >/dev/null 2>&1 &",
                "sh", _DAEMON, os.environ["KSEARCH_TEST_MARKER"], str(_w)], pass_fds=(_w,), check=True)
os.close(_w)
if select.select([_r], [], [], 20)[0] and os.read(_r, 2) == b"up":
    print("daemon started")


def run(x):
    xf = x.astype(mx.float32)
    e = mx.exp(xf - mx.max(xf, axis=-1, keepdims=True))
    return (e / mx.sum(e, axis=-1, keepdims=True)).astype(x.dtype)
