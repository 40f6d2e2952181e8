"""Prefill attention with GQA and an optional causal mask aligned to the lower right."""

from __future__ import annotations

import math
from typing import Any

from ksearch.tasks.base import Baseline, Task, TensorSpec, Workload, read_starter


def reference(inputs: dict[str, Any], causal: bool) -> tuple[Any]:
    import mlx.core as mx

    f32 = mx.float32
    q, k, v = (inputs[n].astype(f32) for n in ("q", "k", "v"))
    b, hq, length, dh = q.shape
    hkv, s = k.shape[1], k.shape[2]
    group = hq // hkv
    k = mx.repeat(k, group, axis=1)
    v = mx.repeat(v, group, axis=1)
    scale = 1.0 / math.sqrt(dh)
    outs = []
    # Query blocks bound the fp32 score matrix to a few hundred MB even at L=S=8192.
    step = max(1, min(length, (1 << 26) // max(1, b * hq * s)))
    for start in range(0, length, step):
        qb = q[:, :, start : start + step]
        scores = (qb @ k.transpose(0, 1, 3, 2)) * scale
        if causal:
            rows = mx.arange(start, min(start + step, length))[:, None] + (s - length)
            scores = mx.where(mx.arange(s)[None, :] <= rows, scores, -mx.inf)
        m = mx.max(scores, axis=-1, keepdims=True)
        p = mx.exp(scores - m)
        outs.append((p / mx.sum(p, axis=-1, keepdims=True)) @ v)
        mx.eval(outs[-1])
    return (mx.concatenate(outs, axis=2),)


def _flops(w: Workload) -> float:
    a = w.axes
    full = 4.0 * a["B"] * a["Hq"] * a["L"] * a["S"] * a["D"]
    return full / 2 if w.params.get("causal") else full


def _bytes(w: Workload) -> float:
    a = w.axes
    size = 4 if w.dtype == "float32" else 2
    return size * a["D"] * (2 * a["B"] * a["Hq"] * a["L"] + 2 * a["B"] * a["Hkv"] * a["S"])


def _w(name: str, b: int, hq: int, hkv: int, length: int, d: int, dtype: str, causal: bool,
       split: str = "search", tier: str = "gpu") -> Workload:
    return Workload(name, {"B": b, "Hq": hq, "Hkv": hkv, "L": length, "S": length, "D": d}, dtype,
                    params={"causal": causal}, split=split, tier=tier)  # type: ignore[arg-type]


WORKLOADS = [
    _w("cpu_b1_h4_l128_d64_f32", 1, 4, 2, 128, 64, "float32", False, tier="cpu"),
    _w("cpu_b1_h4_l128_d64_f32_causal", 1, 4, 2, 128, 64, "float32", True, tier="cpu"),
    _w("cpu_b1_h4_l256_d32_f16_causal", 1, 4, 4, 256, 32, "float16", True, tier="cpu"),
    _w("cpu_b2_h4_l96_d64_f32", 2, 4, 1, 96, 64, "float32", False, split="holdout", tier="cpu"),
    _w("gpu_b1_h32_kv8_l4096_d128_f16", 1, 32, 8, 4096, 128, "float16", False),
    _w("gpu_b1_h32_kv8_l4096_d128_f16_causal", 1, 32, 8, 4096, 128, "float16", True),
    _w("gpu_b2_h32_kv32_l2048_d64_bf16", 2, 32, 32, 2048, 64, "bfloat16", False),
    _w("gpu_b1_h32_kv32_l8192_d128_bf16_causal", 1, 32, 32, 8192, 128, "bfloat16", True, split="holdout"),
    _w("gpu_b4_h32_kv8_l2048_d128_f16", 4, 32, 8, 2048, 128, "float16", False, split="holdout"),
    _w("gpu_b1_h32_kv8_l2048_d128_f32", 1, 32, 8, 2048, 128, "float32", False, split="holdout"),
]

TASK = Task(
    name="attention",
    kind="attention",
    description=(
        "Prefill attention. run(q, k, v, causal) -> o. q: (B, Hq, L, D); k, v: (B, Hkv, S, D); Hq a multiple of Hkv "
        "(query head h uses kv head h // (Hq // Hkv)). o = softmax(q k^T / sqrt(D) + mask) v, with the causal mask "
        "aligned to the lower right (query i sees keys j <= i + S - L). Accumulate in float32; o in q's dtype."
    ),
    inputs=[TensorSpec("q", ("B", "Hq", "L", "D")), TensorSpec("k", ("B", "Hkv", "S", "D")),
            TensorSpec("v", ("B", "Hkv", "S", "D"))],
    outputs=[TensorSpec("o", ("B", "Hq", "L", "D"))],
    workloads=WORKLOADS,
    reference=reference,
    flops=_flops,
    bytes_moved=_bytes,
    forbidden=("mx.fast.scaled_dot_product_attention",),
    baselines={
        "naive": Baseline(
            "naive",
            {"cpu": read_starter("attention_cpu.py"), "cuda": read_starter("attention_cuda.py"),
             "metal": read_starter("attention_metal.py")},
            "the starting candidate: unfused MLX ops on CPU, one thread per query row on GPUs",
        ),
        "native": Baseline("native", {"any": read_starter("attention_native.py")},
                           "mx.fast.scaled_dot_product_attention (cuDNN on CUDA where it applies)"),
    },
    default_baseline="native",
    origin="attention",
)
