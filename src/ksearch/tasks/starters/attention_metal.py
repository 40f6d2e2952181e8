# Naive MLX-Metal attention: one thread per (batch, head, query row), online softmax over all keys, fp32 accumulators.
import math

import mlx.core as mx

_SOURCE = """
    uint idx = thread_position_in_grid.x;
    int B = q_shape[0], Hq = q_shape[1], L = q_shape[2];
    int Hkv = k_shape[1], S = k_shape[2];
    if ((int)idx >= B * Hq * L) return;
    int i = idx % L;
    int h = (idx / L) % Hq;
    int b = idx / (L * Hq);
    int hk = h / (Hq / Hkv);
    size_t kbase = ((size_t)b * Hkv + hk) * S * HEAD_DIM;
    float acc[HEAD_DIM];
    float qv[HEAD_DIM];
    for (int d = 0; d < HEAD_DIM; ++d) { acc[d] = 0.0f; qv[d] = (float)q[idx * HEAD_DIM + d] * scale[0]; }
    float m = -INFINITY, l = 0.0f;
    int last = CAUSAL ? metal::min(S, i + S - L + 1) : S;
    for (int j = 0; j < last; ++j) {
        float s = 0.0f;
        for (int d = 0; d < HEAD_DIM; ++d) s += qv[d] * (float)k[kbase + (size_t)j * HEAD_DIM + d];
        float m_new = metal::max(m, s);
        float corr = metal::exp(m - m_new);
        float p = metal::exp(s - m_new);
        l = l * corr + p;
        for (int d = 0; d < HEAD_DIM; ++d) acc[d] = acc[d] * corr + p * (float)v[kbase + (size_t)j * HEAD_DIM + d];
        m = m_new;
    }
    for (int d = 0; d < HEAD_DIM; ++d) o[idx * HEAD_DIM + d] = (T)(acc[d] / l);
"""

_kernel = mx.fast.metal_kernel(name="attention_naive", input_names=["q", "k", "v", "scale"], output_names=["o"],
                               source=_SOURCE)


def run(q, k, v, causal):
    b, hq, length, d = q.shape
    threads = b * hq * length
    scale = mx.array([1.0 / math.sqrt(d)], dtype=mx.float32)
    return _kernel(
        inputs=[q, k, v, scale], template=[("T", q.dtype), ("HEAD_DIM", d), ("CAUSAL", bool(causal))],
        grid=(threads, 1, 1), threadgroup=(128, 1, 1), output_shapes=[q.shape], output_dtypes=[q.dtype],
    )[0]
