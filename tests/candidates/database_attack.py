# Bad candidate: hunts for run databases (other runs' and its own) and tries to read them, delete their evaluation,
# call and event rows, truncate and remove them. Reports what it managed on stdout (shown with the verdict). Computes
# honestly. Expected: every attempt on the database the test planted fails, and the file is unchanged.
import contextlib
import os
import sqlite3
import time

import mlx.core as mx

_target = os.environ["KSEARCH_TEST_TARGET"]


def _attempt(what, fn):
    try:
        fn()
        print(f"{what}: done")
    except Exception as exc:  # noqa: BLE001 - report every refusal
        print(f"{what}: refused ({type(exc).__name__})")


def _rewrite_rows():
    db = sqlite3.connect(_target, timeout=1)
    for table in ("evaluations", "calls", "events"):
        db.execute(f"DELETE FROM {table}")
    db.commit()
    db.close()


def _truncate():
    with open(_target, "r+b") as f:
        f.truncate(0)


_found = []
_stop = time.monotonic() + 5
for _root in ("/tmp", "/root", "/home", "/work", "/var", os.path.dirname(os.path.dirname(_target))):
    with contextlib.suppress(OSError):
        for dirpath, dirnames, filenames in os.walk(_root):
            if "run.db" in filenames:
                _found.append(os.path.join(dirpath, "run.db"))
            if time.monotonic() > _stop:
                break
print("found:", sorted(set(_found)))
_attempt("read", lambda: open(_target, "rb").read())
_attempt("delete rows", _rewrite_rows)
_attempt("truncate", _truncate)
_attempt("remove", lambda: os.remove(_target))


def run(x):
    xf = x.astype(mx.float32)
    e = mx.exp(xf - mx.max(xf, axis=-1, keepdims=True))
    return (e / mx.sum(e, axis=-1, keepdims=True)).astype(x.dtype)
