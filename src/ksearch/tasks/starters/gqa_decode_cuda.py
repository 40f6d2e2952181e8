# Naive MLX-CUDA GQA decode: one block of 128 threads per (batch, query head); each thread owns a strided set of
# positions, then a shared-memory merge of the per-thread (max, sum, acc) triples. Correct, not tuned.
import math

import mlx.core as mx

_SOURCE = """
    constexpr int NT = 128;
    int bh = blockIdx.x;
    int Hq = q_shape[1];
    int Hkv = k_cache_shape[1], cap = k_cache_shape[2];
    int b = bh / Hq, h = bh % Hq;
    int hk = h / (Hq / Hkv);
    int len = length[0];
    const T* qr = q + (size_t)bh * HEAD_DIM;
    const T* kb = k_cache + ((size_t)b * Hkv + hk) * cap * HEAD_DIM;
    const T* vb = v_cache + ((size_t)b * Hkv + hk) * cap * HEAD_DIM;
    float qv[HEAD_DIM], acc[HEAD_DIM];
    for (int d = 0; d < HEAD_DIM; ++d) { qv[d] = (float)qr[d] * scale[0]; acc[d] = 0.f; }
    float m = __int_as_float(0xff800000), l = 0.f;
    for (int j = threadIdx.x; j < len; j += NT) {
        float s = 0.f;
        for (int d = 0; d < HEAD_DIM; ++d) s += qv[d] * (float)kb[(size_t)j * HEAD_DIM + d];
        float m_new = fmaxf(m, s);
        float corr = expf(m - m_new), p = expf(s - m_new);
        l = l * corr + p;
        for (int d = 0; d < HEAD_DIM; ++d) acc[d] = acc[d] * corr + p * (float)vb[(size_t)j * HEAD_DIM + d];
        m = m_new;
    }
    __shared__ float sm[NT], sl[NT];
    __shared__ float sacc[HEAD_DIM];
    sm[threadIdx.x] = m;
    __syncthreads();
    float gm = sm[0];
    for (int t = 1; t < NT; ++t) gm = fmaxf(gm, sm[t]);
    float w = (m == __int_as_float(0xff800000)) ? 0.f : expf(m - gm);
    sl[threadIdx.x] = l * w;
    for (int d = threadIdx.x; d < HEAD_DIM; d += NT) sacc[d] = 0.f;
    __syncthreads();
    for (int d = 0; d < HEAD_DIM; ++d) atomicAdd(&sacc[d], acc[d] * w);
    __syncthreads();
    if (threadIdx.x == 0) {
        float tot = 0.f;
        for (int t = 0; t < NT; ++t) tot += sl[t];
        sl[0] = tot;
    }
    __syncthreads();
    for (int d = threadIdx.x; d < HEAD_DIM; d += NT) o[(size_t)bh * HEAD_DIM + d] = (T)(sacc[d] / sl[0]);
"""

_kernel = mx.fast.cuda_kernel(name="gqa_decode_naive", input_names=["q", "k_cache", "v_cache", "length", "scale"],
                              output_names=["o"], source=_SOURCE)


def run(q, k_cache, v_cache, length):
    b, hq, _, d = q.shape
    scale = mx.array([1.0 / math.sqrt(d)], dtype=mx.float32)
    n = mx.array([length], dtype=mx.int32)
    return _kernel(
        inputs=[q, k_cache, v_cache, n, scale], template=[("T", q.dtype), ("HEAD_DIM", d)],
        grid=(b * hq * 128, 1, 1), threadgroup=(128, 1, 1), output_shapes=[q.shape], output_dtypes=[q.dtype],
    )[0]
