import math

import mlx.core as mx


def run(q, k, v, causal):
    return mx.fast.scaled_dot_product_attention(
        q, k, v, scale=1.0 / math.sqrt(q.shape[-1]), mask="causal" if causal else None
    )
