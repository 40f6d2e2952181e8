"""One decode step of GQA attention against a KV cache laid out as mlx-lm holds it (fixed capacity, `length` valid)."""

from __future__ import annotations

import math
from typing import Any

from ksearch.tasks.base import Baseline, Task, TensorSpec, Workload, read_starter


def reference(inputs: dict[str, Any], length: int) -> tuple[Any]:
    import mlx.core as mx

    f32 = mx.float32
    q = inputs["q"].astype(f32)
    k = inputs["k_cache"][:, :, :length].astype(f32)
    v = inputs["v_cache"][:, :, :length].astype(f32)
    b, hq, _, d = q.shape
    hkv = k.shape[1]
    group = hq // hkv
    # (B, Hkv, group, D) @ (B, Hkv, D, len): no K/V repetition, bounded memory.
    qg = q.reshape(b, hkv, group, d) * (1.0 / math.sqrt(d))
    scores = qg @ k.transpose(0, 1, 3, 2)
    m = mx.max(scores, axis=-1, keepdims=True)
    p = mx.exp(scores - m)
    o = (p / mx.sum(p, axis=-1, keepdims=True)) @ v
    return (o.reshape(b, hq, 1, d),)


def _bytes(w: Workload) -> float:
    a = w.axes
    size = 4 if w.dtype == "float32" else 2
    length = int(w.params["length"])
    return size * a["D"] * (2 * a["B"] * a["Hkv"] * length + 2 * a["B"] * a["Hq"])


def _flops(w: Workload) -> float:
    a = w.axes
    return 4.0 * a["B"] * a["Hq"] * int(w.params["length"]) * a["D"]


def _w(name: str, b: int, hq: int, hkv: int, cap: int, length: int, d: int, dtype: str,
       split: str = "search", tier: str = "gpu") -> Workload:
    return Workload(name, {"B": b, "Hq": hq, "Hkv": hkv, "capacity": cap, "D": d, "one": 1}, dtype,
                    params={"length": length}, split=split, tier=tier)  # type: ignore[arg-type]


WORKLOADS = [
    _w("cpu_b1_h8_kv2_len300_d64_f32", 1, 8, 2, 512, 300, 64, "float32", tier="cpu"),
    _w("cpu_b2_h8_kv2_len1000_d64_f32", 2, 8, 2, 1024, 1000, 64, "float32", tier="cpu"),
    _w("cpu_b1_h8_kv2_len700_d64_f16", 1, 8, 2, 1024, 700, 64, "float16", tier="cpu"),
    _w("cpu_b1_h4_kv1_len513_d128_f32", 1, 4, 1, 1024, 513, 128, "float32", split="holdout", tier="cpu"),
    _w("gpu_b1_len4096", 1, 32, 8, 4352, 4096, 128, "float16"),
    _w("gpu_b8_len16384", 8, 32, 8, 16640, 16384, 128, "float16"),
    _w("gpu_b16_len32768", 16, 32, 8, 33024, 32768, 128, "float16"),
    _w("gpu_b1_len32768", 1, 32, 8, 33024, 32768, 128, "float16", split="holdout"),
    _w("gpu_b16_len4096", 16, 32, 8, 4352, 4000, 128, "float16", split="holdout"),
    _w("gpu_b8_len16384_bf16", 8, 32, 8, 16640, 16000, 128, "bfloat16", split="holdout"),
]

TASK = Task(
    name="gqa_decode",
    kind="decode",
    description=(
        "One GQA decode step. run(q, k_cache, v_cache, length) -> o. q: (B, Hq, 1, D); k_cache, v_cache: "
        "(B, Hkv, capacity, D) of which positions [0, length) are valid (the rest is garbage and must not be read); "
        "o = softmax(q k[:length]^T / sqrt(D)) v[:length], query head h using kv head h // (Hq // Hkv); "
        "accumulate in float32; o: (B, Hq, 1, D) in q's dtype."
    ),
    inputs=[TensorSpec("q", ("B", "Hq", "one", "D")), TensorSpec("k_cache", ("B", "Hkv", "capacity", "D")),
            TensorSpec("v_cache", ("B", "Hkv", "capacity", "D"))],
    outputs=[TensorSpec("o", ("B", "Hq", "one", "D"))],
    workloads=WORKLOADS,
    reference=reference,
    flops=_flops,
    bytes_moved=_bytes,
    forbidden=("mx.fast.scaled_dot_product_attention",),
    # A decode step's layers: each call's query is the previous call's output (docs/harness.md, "Chained calls").
    chain=("q", 0),
    baselines={
        "naive": Baseline(
            "naive",
            {"cpu": read_starter("gqa_decode_cpu.py"), "cuda": read_starter("gqa_decode_cuda.py"),
             "metal": read_starter("gqa_decode_metal.py")},
            "the starting candidate: MLX ops on CPU, one threadgroup per query head on GPUs",
        ),
        "native": Baseline(
            "native",
            {"any": read_starter("gqa_decode_native.py")},
            "the faster of MLX's attention on cache slices and on contiguous copies, per workload",
        ),
    },
    default_baseline="native",
    origin="gqa_decode",
)

