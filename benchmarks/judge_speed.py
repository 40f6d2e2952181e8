"""How long the parent takes to judge one output against its reference (harness/judge.py), at the sizes of the GPU
workloads' outputs: per task and GPU-tier workload, the median of `--repeat` judgements of an output within
tolerance (the common case: every trial and checked timed call of a passing candidate) and of one that fails.

    python benchmarks/judge_speed.py [--tasks softmax attention rmsnorm] [--repeat 5]

Prints one line per workload; no GPU needed (the parent judges in NumPy on the host).
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

from ksearch.harness.judge import judge
from ksearch.tasks import get_task


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tasks", nargs="+", default=["softmax", "attention", "rmsnorm"])
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    for name in args.tasks:
        task = get_task(name)
        for w in (w for w in task.workloads if w.tier == "gpu" and w.split == "search"):
            refs, outs, dtypes = [], [], []
            for spec in task.outputs:
                shape, dtype = spec.resolved_shape(w), spec.resolved_dtype(w)
                ref = rng.standard_normal(shape, dtype=np.float32)
                refs.append(ref)
                outs.append(ref.astype(np.float16 if dtype != "float32" else np.float32))
                dtypes.append(dtype)
            times = {}
            for case in ("within", "outside"):
                got = [o.copy() for o in outs]
                if case == "outside":
                    got[0].reshape(-1)[got[0].size // 2] += 10
                runs = []
                for _ in range(args.repeat):
                    t0 = time.perf_counter()
                    verdict = judge(task, w, got, dtypes, refs)
                    runs.append(time.perf_counter() - t0)
                assert verdict.status == ("passed" if case == "within" else "wrong_answer"), verdict
                times[case] = statistics.median(runs)
            size = sum(o.size for o in outs)
            print(f"{name:10s} {w.name:36s} {size / 1e6:6.1f} M values  within {times['within']:.3f} s  "
                  f"outside {times['outside']:.3f} s")


if __name__ == "__main__":
    main()
