# Bad candidate (gqa_decode, a chained task): when its query is the output it returned last (a timed run's calls after
# the first, Task.chain), it returns zeros without computing anything; every other call is the starter's, so the
# correctness trials (single calls) pass. Expected: wrong_answer (the parent judges a chained timed call against the
# reference made from the previous call's committed output).
import mlx.core as mx

from ksearch.tasks.starters.gqa_decode_cpu import run as starter

_last = []


def run(q, k_cache, v_cache, length):
    out = mx.zeros_like(q) if _last and _last[-1] is q else starter(q, k_cache, v_cache, length)
    _last[:] = [out]
    return out
