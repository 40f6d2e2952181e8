"""Text shared by the attention template families: the row kernel (one thread per query row) and the two fallbacks a
tensor-core candidate carries (fp32 MLX ops for shapes no kernel takes; for float32 inputs the 3xTF32 kernel of
kernels/attention/tf32x3.py, or the fp32 row kernel where it does not apply)."""

from __future__ import annotations

# One thread per (batch, head, query row); NT rows of one head per block so that K/V tiles in shared memory serve
# all of them (TILE); EXP2 folds log2(e) into q; SKIP stops loading tiles past the block's causal diagonal.
ROW_TILED_SOURCE = r"""
    int Hq = q_shape[1], L = q_shape[2], Hkv = k_shape[1], S = k_shape[2];
    int nblk = (L + NT - 1) / NT;
    int bh = blockIdx.x / nblk, r0 = (blockIdx.x % nblk) * NT, i = r0 + threadIdx.x;
    int b = bh / Hq, h = bh % Hq, hk = h / (Hq / Hkv);
    bool active = i < L;
    const T* kb = k + ((size_t)b * Hkv + hk) * S * HEAD_DIM;
    const T* vb = v + ((size_t)b * Hkv + hk) * S * HEAD_DIM;
    float qscale = scale[0] * (EXP2 ? 1.4426950408889634f : 1.f);
    float acc[HEAD_DIM], qv[HEAD_DIM];
    for (int d = 0; d < HEAD_DIM; ++d) {
      acc[d] = 0.f;
      qv[d] = active ? (float)q[((size_t)bh * L + i) * HEAD_DIM + d] * qscale : 0.f;
    }
    float m = -1e30f, l = 0.f;
    int last = CAUSAL ? min(S, i + S - L + 1) : S;
    if (!active) last = 0;
    if (TILE) {
      __shared__ T Ks[BN * HEAD_DIM], Vs[BN * HEAD_DIM];
      int block_last = (CAUSAL && SKIP) ? min(S, min(L, r0 + NT) + S - L) : S;
      for (int n0 = 0; n0 < block_last; n0 += BN) {
        __syncthreads();
        for (int e = threadIdx.x; e < BN * HEAD_DIM; e += NT) {
          bool in = n0 + e / HEAD_DIM < S;
          Ks[e] = in ? kb[(size_t)n0 * HEAD_DIM + e] : (T)0.f;
          Vs[e] = in ? vb[(size_t)n0 * HEAD_DIM + e] : (T)0.f;
        }
        __syncthreads();
        int nmax = min(BN, last - n0);
        for (int jj = 0; jj < nmax; ++jj) {
          float s = 0.f;
          for (int d = 0; d < HEAD_DIM; ++d) s += qv[d] * (float)Ks[jj * HEAD_DIM + d];
          float mn = fmaxf(m, s);
          float corr = EXP2 ? exp2f(m - mn) : expf(m - mn), p = EXP2 ? exp2f(s - mn) : expf(s - mn);
          l = l * corr + p;
          for (int d = 0; d < HEAD_DIM; ++d) acc[d] = acc[d] * corr + p * (float)Vs[jj * HEAD_DIM + d];
          m = mn;
        }
      }
    } else {
      for (int j = 0; j < last; ++j) {
        float s = 0.f;
        for (int d = 0; d < HEAD_DIM; ++d) s += qv[d] * (float)kb[(size_t)j * HEAD_DIM + d];
        float mn = fmaxf(m, s);
        float corr = EXP2 ? exp2f(m - mn) : expf(m - mn), p = EXP2 ? exp2f(s - mn) : expf(s - mn);
        l = l * corr + p;
        for (int d = 0; d < HEAD_DIM; ++d) acc[d] = acc[d] * corr + p * (float)vb[(size_t)j * HEAD_DIM + d];
        m = mn;
      }
    }
    if (active) {
      for (int d = 0; d < HEAD_DIM; ++d) o[((size_t)bh * L + i) * HEAD_DIM + d] = (T)(acc[d] / l);
    }
"""

OPS_FALLBACK = '''
def _ops(q, k, v, causal):
    # fp32 MLX ops, query-blocked, GQA without repetition: what the kernel does not take.
    b, hq, length, d = q.shape
    hkv, s = k.shape[1], k.shape[2]
    g = hq // hkv
    kf = k.astype(mx.float32)[:, :, None]
    vf = v.astype(mx.float32)[:, :, None]
    qf = q.astype(mx.float32).reshape(b, hkv, g, length, d) * (1.0 / math.sqrt(d))
    outs = []
    for r0 in range(0, length, 512):
        sc = qf[:, :, :, r0:r0 + 512] @ kf.transpose(0, 1, 2, 4, 3)
        if causal:
            rows = mx.arange(r0, min(r0 + 512, length))[:, None] + (s - length)
            sc = mx.where(mx.arange(s)[None, :] <= rows, sc, -mx.inf)
        p = mx.exp(sc - mx.max(sc, axis=-1, keepdims=True))
        outs.append((p / mx.sum(p, axis=-1, keepdims=True)) @ vf)
    return mx.concatenate(outs, axis=3).reshape(b, hq, length, d).astype(q.dtype)
'''



# float32: no tensor cores (their fp32 input is TF32, as is MLX's own fp32 matmul on CUDA by default, and the task
# compares against a true fp32 reference): the row kernel, in fp32 FMAs. Needs `math`, `mx` and ROW_TILED_SOURCE
# rendered as ROW_SOURCE.
F32_PATH = '''
_rows = mx.fast.cuda_kernel(name="attention_rows_f32", input_names=["q", "k", "v", "scale"], output_names=["o"],
                            source=ROW_SOURCE)


def _f32(q, k, v, causal):
    b, hq, length, d = q.shape
    scale = mx.array([1.0 / math.sqrt(d)], dtype=mx.float32)
    return _rows(inputs=[q, k, v, scale],
                 template=[("T", q.dtype), ("HEAD_DIM", d), ("CAUSAL", bool(causal)), ("NT", 128), ("BN", 32),
                           ("TILE", True), ("EXP2", True), ("SKIP", True)],
                 grid=(b * hq * ((length + 127) // 128) * 128, 1, 1), threadgroup=(128, 1, 1),
                 output_shapes=[q.shape], output_dtypes=[q.dtype])[0]
'''


# float32 on tensor cores: each product as three TF32 products (kernels/attention/tf32x3.py: within fp32's error, which
# one TF32 product is not), for D 64 / 128 (and the mask only with L <= S), launched as the library launches its
# default configurations; the row kernel for the rest. Needs `math`, `mx`, ROW_SOURCE, TF32X3_SOURCE and
# TF32X3_HEADER.
F32_TC_HEAD = F32_PATH.replace("def _f32(", "def _f32_rows(") + '''
_tf32x3_d64 = mx.fast.cuda_kernel(name="attention_tf32x3_d64", input_names=["q", "k", "v", "scale"],
                                  output_names=["o"], source=TF32X3_SOURCE, header=TF32X3_HEADER,
                                  shared_memory=TF32X3_SMEM_64)
_tf32x3_d128 = mx.fast.cuda_kernel(name="attention_tf32x3_d128", input_names=["q", "k", "v", "scale"],
                                   output_names=["o"], source=TF32X3_SOURCE, header=TF32X3_HEADER,
                                   shared_memory=TF32X3_SMEM_128)


def _f32(q, k, v, causal):
    b, hq, length, d = q.shape
    if d not in (64, 128) or (causal and length > k.shape[2]):
        return _f32_rows(q, k, v, causal)
    scale = mx.array([1.0 / math.sqrt(d)], dtype=mx.float32)
'''


def _tf32x3_launch(d: int, bm: int, bn: int, qreg: bool) -> str:
    """`_f32`'s launch of the 3xTF32 kernel at head dim d: BM rows a block, 16 a warp."""
    threads = bm // 16 * 32
    call = f"_tf32x3_d{d}(inputs=[q, k, v, scale],"
    pad = " " * (len("        return ") + len(f"_tf32x3_d{d}("))
    return (f"    if d == {d}:\n        return {call}\n"
            f"{pad}template=[(\"T\", q.dtype), (\"D\", {d}), (\"BM\", {bm}), (\"BN\", {bn}), "
            f"(\"CAUSAL\", bool(causal)),\n{pad}          (\"QREG\", {qreg})],\n"
            f"{pad}grid=((length + {bm - 1}) // {bm} * {threads}, b * hq, 1), threadgroup=({threads}, 1, 1),\n"
            f"{pad}output_shapes=[q.shape], output_dtypes=[q.dtype])[0]\n")


def fallbacks() -> str:
    """What a tensor-core candidate carries for the inputs its kernel does not take: `_ops` and `_f32` (three TF32
    products on tensor cores where they apply, the row kernel in fp32 FMAs elsewhere)."""
    from ksearch.kernels.attention import tf32x3

    text = OPS_FALLBACK + f"\nROW_SOURCE = {ROW_TILED_SOURCE!r}\n"
    configs = {d: tf32x3.default_config(d) for d in (64, 128)}
    sources = {c.source() for c in configs.values()}
    assert len(sources) == 1  # one kernel text for both head dims
    return (text + f"TF32X3_SOURCE = {sources.pop()!r}\nTF32X3_HEADER = {tf32x3.TF32X3_HEADER!r}\n"
            + "".join(f"TF32X3_SMEM_{d} = {c.smem_bytes(d)}\n" for d, c in configs.items()) + F32_TC_HEAD
            + "".join(_tf32x3_launch(d, c.bm, c.bn, c.qreg) for d, c in configs.items()) + "\n")


# The head of such a candidate's run(): float32 to `_f32`, then what no tensor-core kernel takes to `_ops`.
RUN_HEAD = """
def run(q, k, v, causal):
    b, hq, length, d = q.shape
    s = k.shape[2]
    if q.dtype == mx.float32 and d <= 128:
        return _f32(q, k, v, causal)
"""
