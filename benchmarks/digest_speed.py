"""Input fingerprint speed, before and after (side by side, one process): digest_numpy on the largest input of the
gqa_decode task's GPU workloads (a 1.08 GB fp16 KV cache) vs the earlier float64-sum fingerprint.

    python benchmarks/digest_speed.py [OUT_DIR]
"""

from __future__ import annotations

import hashlib
import statistics
import sys
from typing import Any

import numpy as np

from ksearch.backends import best_backend
from ksearch.bench.results import make_result, write_result
from ksearch.bench.timing import latency_stats, time_rounds
from ksearch.harness.digest import FULL_HASH_LIMIT, digest_numpy


def earlier_digest(a: np.ndarray) -> str:
    """The fingerprint before this change, kept here only to time it."""
    h = hashlib.blake2b(digest_size=16)
    h.update(f"{a.dtype.str}{a.shape}".encode())
    flat = np.ascontiguousarray(a).reshape(-1)
    step = max(1, flat.size // (FULL_HASH_LIMIT // flat.itemsize // 4))
    h.update(np.ascontiguousarray(flat[::step]).tobytes())
    h.update(np.float64(flat.astype(np.float64).sum()).tobytes())
    h.update(np.float64(np.abs(flat.astype(np.float64)).sum()).tobytes())
    return h.hexdigest()


def main(out_dir: str) -> None:
    shape = (16, 8, 33024, 128)  # gqa_decode gpu_b16_len32768: k_cache
    a = np.random.default_rng(0).standard_normal(int(np.prod(shape)), dtype=np.float32).astype(np.float16)
    a = a.reshape(shape)
    # Host code: three interleaved rounds of one call each, no warm-up, nothing to synchronise.
    times = time_rounds({"digest_numpy": lambda: digest_numpy(a), "earlier": lambda: earlier_digest(a)}, rounds=3,
                        warmup=0, device=False)
    med = {k: statistics.median(v) for k, v in times.items()}
    figures: list[dict[str, Any]] = [{"contender": k, "shape": list(shape), "dtype": "float16", "bytes": a.nbytes,
                                      **latency_stats(times[k]), "reps": 3} for k in times]
    summary = {"speedup": med["earlier"] / med["digest_numpy"], "new_s": med["digest_numpy"], "earlier_s": med["earlier"]}
    print(summary)
    data = make_result("digest-speed", best_backend(), figures, [list(shape)], ["float16"], summary,
                       "Host-side input fingerprint of a 1.08 GB array (CPU, single thread), medians of 3, "
                       "interleaved. Each GPU trial fingerprints every input twice (before and after the call).")
    print(write_result(data, out_dir))


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "benchmarks/results")
