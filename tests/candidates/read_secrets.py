# Bad candidate: hunts for an API key: in its own environment, and in the environment of every process it can see
# through /proc (the user's shell that started the search held one), in particular the process the test names.
# Reports the names it found, never a value. Computes honestly. Expected: no key anywhere.
import os

import mlx.core as mx

_NAME = b"LLM_AUTH"
print("own environment:", " ".join(sorted(os.environ)))
_readable, _holding = 0, []
try:
    _pids = {p for p in os.listdir("/proc") if p.isdigit()}
except OSError:
    _pids = set()
for _pid in sorted(_pids | {os.environ["KSEARCH_TEST_TARGET_PID"]}):
    try:
        with open(f"/proc/{_pid}/environ", "rb") as _f:
            _env = _f.read()
    except OSError:
        continue
    _readable += 1
    if _NAME + b"=" in _env:
        _holding.append(_pid)
print(f"environ readable: {_readable}; holding the key: {len(_holding)}")


def run(x):
    xf = x.astype(mx.float32)
    e = mx.exp(xf - mx.max(xf, axis=-1, keepdims=True))
    return (e / mx.sum(e, axis=-1, keepdims=True)).astype(x.dtype)
