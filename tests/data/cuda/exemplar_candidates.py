"""Turn a pattern's kernel exemplar (a body) into a full candidate for its micro-task (tests/data/cuda/micro_tasks.py).

MLX launches both dialects the same way (grid counts threads), so one `run` per pattern serves the CUDA and the
Metal exemplar; only the factory differs.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Launch:
    task: str
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    run: str  # the candidate's run() (uses the kernel object `_k`)
    workloads: tuple[str, ...] | None = None  # None: every gpu workload of the task


def _rows(template: str, per_block: str = "rows * 256", out_shape: str = "[(rows,)]") -> str:
    return f'''
def run(x):
    rows = x.shape[0]
    return _k(inputs=[x], template={template}, grid=({per_block}, 1, 1), threadgroup=(256, 1, 1),
              output_shapes={out_shape}, output_dtypes=[x.dtype])[0]
'''


_ROWSUM = _rows('[("T", x.dtype), ("TPB", 256)]')
_SOFTMAX = _rows('[("T", x.dtype), ("TPB", 256)]', out_shape="[x.shape]")
_MATMUL = '''
def run(a, b):
    m, n = a.shape[0], b.shape[1]
    return _k(inputs=[a, b], template=[("T", a.dtype), ("TILE", 16)], grid=((n + 15) // 16 * 16, (m + 15) // 16 * 16, 1),
              threadgroup=(16, 16, 1), output_shapes=[(m, n)], output_dtypes=[a.dtype])[0]
'''
_SCAN = '''
def run(a, b):
    rows = a.shape[0]
    return _k(inputs=[a, b], template=[("T", a.dtype), ("TPB", 256){extra}], grid=(rows * 256, 1, 1),
              threadgroup=(256, 1, 1), output_shapes=[a.shape], output_dtypes=[a.dtype])[0]
'''

LAUNCHES: dict[str, Launch] = {
    "simd_register_reduction": Launch("rowsum", ("x",), ("out",), _ROWSUM),
    "vectorized_loads": Launch("rowsum", ("x",), ("out",), _ROWSUM),
    "loop_unrolling": Launch("rowsum", ("x",), ("out",), _rows('[("T", x.dtype), ("TPB", 256), ("ITEMS", 4)]')),
    "multi_row_per_block": Launch("rowsum", ("x",), ("out",),
                                  _rows('[("T", x.dtype), ("TPB", 256)]', "(rows + 7) // 8 * 256")),
    "block_per_row": Launch("softmax", ("x",), ("out",), _SOFTMAX),
    "online_softmax": Launch("softmax", ("x",), ("out",), _SOFTMAX),
    "exp2_trick": Launch("softmax", ("x",), ("out",), _SOFTMAX),
    "fused_epilogue": Launch("rmsnorm", ("x", "w"), ("out",), '''
def run(x, w):
    rows = x.shape[0]
    return _k(inputs=[x, w], template=[("T", x.dtype), ("TPB", 256)], grid=(rows * 256, 1, 1),
              threadgroup=(256, 1, 1), output_shapes=[x.shape], output_dtypes=[x.dtype])[0]
'''),
    "threadgroup_tiling": Launch("matmul", ("a", "b"), ("c",), _MATMUL),
    "double_buffering": Launch("matmul", ("a", "b"), ("c",), _MATMUL),
    "tensor_core_mma": Launch("matmul", ("a", "b"), ("c",), '''
def run(a, b):
    m, n = a.shape[0], b.shape[1]
    warps = (m // 16) * (n // 8)
    return _k(inputs=[a, b], template=[("T", a.dtype), ("TPB", 128)], grid=(warps * 32, 1, 1),
              threadgroup=(128, 1, 1), output_shapes=[(m, n)], output_dtypes=[a.dtype])[0]
''', workloads=("g_f16_128x96x64",)),
    "k_transposition": Launch("qkt", ("q", "k"), ("scores",), '''
def run(q, k):
    m, n = q.shape[0], k.shape[0]
    return _k(inputs=[q, k], template=[("T", q.dtype), ("TILE", 16)], grid=((n + 15) // 16 * 16, (m + 15) // 16 * 16, 1),
              threadgroup=(16, 16, 1), output_shapes=[(m, n)], output_dtypes=[q.dtype])[0]
'''),
    "causal_block_skipping": Launch("attention", ("q", "k", "v"), ("o",), '''
def run(q, k, v, causal):
    b, h, length, d = q.shape
    return _k(inputs=[q, k, v], template=[("T", q.dtype), ("HEAD_DIM", d), ("CAUSAL", bool(causal))],
              grid=((length + 31) // 32 * 32, b * h, 1), threadgroup=(32, 1, 1),
              output_shapes=[q.shape], output_dtypes=[q.dtype])[0]
'''),
    "split_k_decode_lse_merge": Launch("decode", ("q", "k", "v"), ("part_m", "part_l", "part_acc"), '''
NSPLIT = 8


def run(q, k, v):
    b, hq, _, d = q.shape
    warps = b * hq * NSPLIT
    pm, pl, pacc = _k(inputs=[q, k, v], template=[("T", q.dtype), ("HEAD_DIM", d), ("NSPLIT", NSPLIT)],
                      grid=((warps * 32 + 127) // 128 * 128, 1, 1), threadgroup=(128, 1, 1),
                      output_shapes=[(b, hq, NSPLIT), (b, hq, NSPLIT), (b, hq, NSPLIT, d)],
                      output_dtypes=[mx.float32, mx.float32, mx.float32])
    # log-sum-exp merge of the partials: weights exp(m_i - max_i m_i); empty splits (l_i = 0) weigh nothing
    m = pm.max(axis=-1, keepdims=True)
    w = mx.where(pl > 0, mx.exp(pm - m), 0.0)
    out = (w[..., None] * pacc).sum(axis=-2) / (w * pl).sum(axis=-1, keepdims=True)
    return out[:, :, None, :].astype(q.dtype)
'''),
    "gqa_head_grouping": Launch("decode", ("q", "k", "v"), ("o",), '''
def run(q, k, v):
    b, hq, _, d = q.shape
    hkv = k.shape[1]
    tpb = 32 * (hq // hkv)
    return _k(inputs=[q, k, v], template=[("T", q.dtype), ("HEAD_DIM", d), ("TPB", tpb)],
              grid=(b * hkv * tpb, 1, 1), threadgroup=(tpb, 1, 1), output_shapes=[q.shape], output_dtypes=[q.dtype])[0]
'''),
    "warp_level_scan": Launch("linrec", ("a", "b"), ("h",), _SCAN.replace("{extra}", "")),
    "hillis_steele_scan": Launch("linrec", ("a", "b"), ("h",), _SCAN.replace("{extra}", "")),
    "blelloch_scan": Launch("linrec", ("a", "b"), ("h",), _SCAN.replace("{extra}", "")),
    "chunked_scan_carried_prefix": Launch("linrec", ("a", "b"), ("h",), _SCAN.replace("{extra}", ', ("ITEMS", 4)')),
}


def candidate(pattern: str, body: str, dialect: str) -> str:
    """A complete candidate module for `pattern` whose kernel body is `body` (dialect "cuda" or "metal")."""
    launch = LAUNCHES[pattern]
    factory = "cuda_kernel" if dialect == "cuda" else "metal_kernel"
    return (
        "import math\n\nimport mlx.core as mx\n\n"
        f"_SRC = {body!r}\n\n"
        f"_k = mx.fast.{factory}(name={pattern!r}, input_names={list(launch.inputs)!r}, "
        f"output_names={list(launch.outputs)!r}, source=_SRC)\n" + launch.run
    )
