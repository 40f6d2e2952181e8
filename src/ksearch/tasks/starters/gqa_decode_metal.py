# Naive MLX-Metal GQA decode: one thread per (batch, query head), online softmax over the valid positions.
import math

import mlx.core as mx

_SOURCE = """
    uint bh = thread_position_in_grid.x;
    int B = q_shape[0], Hq = q_shape[1];
    int Hkv = k_cache_shape[1], cap = k_cache_shape[2];
    if ((int)bh >= B * Hq) return;
    int b = bh / Hq, h = bh % Hq;
    int hk = h / (Hq / Hkv);
    int len = length[0];
    size_t base = ((size_t)b * Hkv + hk) * cap * HEAD_DIM;
    float qv[HEAD_DIM], acc[HEAD_DIM];
    for (int d = 0; d < HEAD_DIM; ++d) { qv[d] = (float)q[bh * HEAD_DIM + d] * scale[0]; acc[d] = 0.0f; }
    float m = -INFINITY, l = 0.0f;
    for (int j = 0; j < len; ++j) {
        float s = 0.0f;
        for (int d = 0; d < HEAD_DIM; ++d) s += qv[d] * (float)k_cache[base + (size_t)j * HEAD_DIM + d];
        float m_new = metal::max(m, s);
        float corr = metal::exp(m - m_new), p = metal::exp(s - m_new);
        l = l * corr + p;
        for (int d = 0; d < HEAD_DIM; ++d) acc[d] = acc[d] * corr + p * (float)v_cache[base + (size_t)j * HEAD_DIM + d];
        m = m_new;
    }
    for (int d = 0; d < HEAD_DIM; ++d) o[bh * HEAD_DIM + d] = (T)(acc[d] / l);
"""

_kernel = mx.fast.metal_kernel(name="gqa_decode_naive", input_names=["q", "k_cache", "v_cache", "length", "scale"],
                               output_names=["o"], source=_SOURCE)


def run(q, k_cache, v_cache, length):
    b, hq, _, d = q.shape
    scale = mx.array([1.0 / math.sqrt(d)], dtype=mx.float32)
    n = mx.array([length], dtype=mx.int32)
    return _kernel(
        inputs=[q, k_cache, v_cache, n, scale], template=[("T", q.dtype), ("HEAD_DIM", d)],
        grid=(b * hq, 1, 1), threadgroup=(min(64, b * hq), 1, 1), output_shapes=[q.shape], output_dtypes=[q.dtype],
    )[0]
