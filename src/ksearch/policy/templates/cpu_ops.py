"""MLX-ops template families for softmax and rmsnorm on mlx-cpu (no custom kernels exist there).

The knobs are the ones that matter for MLX on a CPU: how many passes over memory the graph makes, whether `mx.compile`
fuses the elementwise chain, and whether a half-precision input is widened for the whole computation or only for the
accumulation.
"""

from __future__ import annotations

from typing import Any

from ksearch.policy.templates.base import TemplateFamily


def _softmax(p: dict[str, Any]) -> str:
    widen = "xf = x.astype(mx.float32)" if p["widen"] == "all" else "xf = x"
    norm = {
        "divide": "e / s",
        "reciprocal": "e * mx.reciprocal(s)",
    }[p["normalise"]]
    acc = "mx.sum(e, axis=-1, keepdims=True)" if p["widen"] == "all" else \
        "mx.sum(e.astype(mx.float32), axis=-1, keepdims=True).astype(e.dtype)"
    body = f"""    {widen}
    m = mx.max(xf, axis=-1, keepdims=True)
    e = mx.exp(xf - m)
    s = {acc}
    return ({norm}).astype(x.dtype)
"""
    return _wrap("x", body, p["compile"])


def _rmsnorm(p: dict[str, Any]) -> str:
    widen = "xf = x.astype(mx.float32)" if p["widen"] == "all" else "xf = x"
    ms = ("mx.mean(mx.square(xf), axis=-1, keepdims=True)" if p["square"] == "square"
          else "mx.sum(xf * xf, axis=-1, keepdims=True) * (1.0 / xf.shape[-1])")
    if p["widen"] != "all":
        ms = ms.replace("xf * xf", "(xf * xf).astype(mx.float32)").replace("mx.square(xf)", "mx.square(xf.astype(mx.float32))")
    scale = "(xf * r) * weight.astype(xf.dtype)" if p["order"] == "scale_last" else "xf * (r * weight.astype(mx.float32)).astype(xf.dtype)"
    body = f"""    {widen}
    r = mx.rsqrt({ms} + 1e-5).astype(xf.dtype)
    return ({scale}).astype(x.dtype)
"""
    return _wrap("x, weight", body, p["compile"])


def _wrap(args: str, body: str, compiled: bool) -> str:
    # No shapeless compile: with it, softmax candidates ran past the 180 s limit on CPU (seen in a budget-6 run).
    head = "import mlx.core as mx\n\n\n"
    if not compiled:
        return head + f"def run({args}):\n{body}"
    return head + f"def _impl({args}):\n{body}\n\n_fused = mx.compile(_impl)\n\n\ndef run({args}):\n" \
        f"    return _fused({args})\n"


FAMILIES = [
    TemplateFamily(
        id="softmax.cpu.ops",
        tasks=("softmax",),
        backends=("mlx-cpu",),
        patterns=("fused_expression", "mx_compile_fusion"),
        params={"widen": ("all", "accumulate"), "normalise": ("divide", "reciprocal"), "compile": (False, True)},
        render=_softmax,
        pattern_params={"mx_compile_fusion": {"compile": (True,)}, "fused_expression": {"normalise": ("reciprocal",)}},
        descriptors=("compile", "widen"),
        description="max / exp / sum / normalise in MLX ops; compile fuses the chain, widening only the sum keeps "
                    "half-precision inputs in half precision",
    ),
    TemplateFamily(
        id="rmsnorm.cpu.ops",
        tasks=("rmsnorm",),
        backends=("mlx-cpu",),
        patterns=("fused_expression", "mx_compile_fusion"),
        params={"widen": ("all", "accumulate"), "square": ("square", "product"), "order": ("scale_last", "fold_weight"),
                "compile": (False, True)},
        render=_rmsnorm,
        pattern_params={"mx_compile_fusion": {"compile": (True,)}, "fused_expression": {"order": ("fold_weight",)}},
        descriptors=("compile", "widen"),
        description="mean of squares, rsqrt and scale in MLX ops; compile fuses the elementwise tail",
    ),
]
