# Bad candidate: leaves a child process sleeping forever (the test finds it by the marker on its command line).
# Computes honestly. Expected: the child is gone after the evaluation.
import os
import subprocess
import sys

import mlx.core as mx

_child = subprocess.Popen([sys.executable, "-c", "import time\nwhile True: time.sleep(1)",
                           os.environ["KSEARCH_TEST_MARKER"]])
print("spawned a sleeper")


def run(x):
    xf = x.astype(mx.float32)
    e = mx.exp(xf - mx.max(xf, axis=-1, keepdims=True))
    return (e / mx.sum(e, axis=-1, keepdims=True)).astype(x.dtype)
