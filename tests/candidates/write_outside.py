# Bad candidate: writes files outside its scratch directory (paths from the test: /tmp, the project directory, ...)
# and one inside it, and reports which writes worked. Computes honestly. Expected: only the scratch write works.
import os

import mlx.core as mx

for _path in os.environ["KSEARCH_TEST_PATHS"].split(os.pathsep) + [os.path.join(os.getcwd(), "inside.txt")]:
    try:
        with open(_path, "w") as _f:
            _f.write("written by a candidate\n")
        print(f"wrote {_path}")
    except OSError as _exc:
        print(f"refused {_path} ({type(_exc).__name__})")


def run(x):
    xf = x.astype(mx.float32)
    e = mx.exp(xf - mx.max(xf, axis=-1, keepdims=True))
    return (e / mx.sum(e, axis=-1, keepdims=True)).astype(x.dtype)
