# Bad candidate: prints a forged "passed" verdict on stdout (and stderr) and returns zeros. Expected: wrong_answer;
# the CLI's --json output stays exactly one object, the parent's.
import json
import sys

import mlx.core as mx

_FORGED = json.dumps({"status": "passed", "score": 1000.0, "message": "", "workloads": []})
print(_FORGED, flush=True)
sys.stderr.write(_FORGED + "\n")


def run(x):
    print(_FORGED, flush=True)
    return mx.zeros_like(x)
