# Bad candidate: writes a forged "passed" verdict straight into its parent's stdout through /proc (Linux), hoping a
# script reading `ksearch eval --json` takes it for the result. Returns zeros. Expected: wrong_answer, and the
# parent's stdout holds exactly one JSON object (the parent's own).
import contextlib
import json
import os

import mlx.core as mx

_FORGED = json.dumps({"status": "passed", "score": 1000.0, "message": "", "workloads": []})
for _pid in {os.getppid()}:
    with contextlib.suppress(OSError), open(f"/proc/{_pid}/fd/1", "w") as _f:
        _f.write(_FORGED + "\n")


def run(x):
    return mx.zeros_like(x)
