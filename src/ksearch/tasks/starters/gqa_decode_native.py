# Two variants; the baseline worker times each and keeps the faster one per workload (see BASELINE_VARIANTS).
import math

import mlx.core as mx

BASELINE_VARIANTS = ("run_slice", "run_contiguous")


def run_slice(q, k_cache, v_cache, length):
    return mx.fast.scaled_dot_product_attention(
        q, k_cache[:, :, :length], v_cache[:, :, :length], scale=1.0 / math.sqrt(q.shape[-1])
    )


def run_contiguous(q, k_cache, v_cache, length):
    k = mx.contiguous(k_cache[:, :, :length])
    v = mx.contiguous(v_cache[:, :, :length])
    return mx.fast.scaled_dot_product_attention(q, k, v, scale=1.0 / math.sqrt(q.shape[-1]))


run = run_slice
