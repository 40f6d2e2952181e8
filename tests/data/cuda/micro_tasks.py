"""Micro-tasks that judge the knowledge base's exemplars through the real harness (tests/test_knowledge_exemplars.py).

A test copies this file next to a one-line suffix `TASK = make("<name>")` so the harness's workers can re-load the task
from its file. Shapes are small (the GPU test runs every exemplar) but not multiples of every tile, to exercise edges.
"""

from __future__ import annotations

import math
from typing import Any

from ksearch.tasks.base import Baseline, Task, TensorSpec, Workload

TOL = {"float32": (1e-3, 1e-3), "float16": (2e-2, 2e-2)}


def _mx() -> Any:
    import mlx.core as mx

    return mx


def _rowsum(inputs: dict[str, Any]) -> tuple[Any]:
    return (inputs["x"].astype(_mx().float32).sum(axis=-1),)


def _softmax(inputs: dict[str, Any]) -> tuple[Any]:
    mx = _mx()
    x = inputs["x"].astype(mx.float32)
    e = mx.exp(x - x.max(axis=-1, keepdims=True))
    return (e / e.sum(axis=-1, keepdims=True),)


def _rmsnorm(inputs: dict[str, Any]) -> tuple[Any]:
    mx = _mx()
    x = inputs["x"].astype(mx.float32)
    return (x * mx.rsqrt((x * x).mean(axis=-1, keepdims=True) + 1e-5) * inputs["w"].astype(mx.float32),)


def _linrec(inputs: dict[str, Any]) -> tuple[Any]:
    mx = _mx()
    a, b = inputs["a"].astype(mx.float32), inputs["b"].astype(mx.float32)
    h, outs = mx.zeros(a.shape[:-1]), []
    for t in range(a.shape[-1]):
        h = a[..., t] * h + b[..., t]
        outs.append(h)
    return (mx.stack(outs, axis=-1),)


def _matmul(inputs: dict[str, Any]) -> tuple[Any]:
    mx = _mx()
    return (inputs["a"].astype(mx.float32) @ inputs["b"].astype(mx.float32),)


def _qkt(inputs: dict[str, Any]) -> tuple[Any]:
    mx = _mx()
    return (inputs["q"].astype(mx.float32) @ inputs["k"].astype(mx.float32).T,)


def _attention(inputs: dict[str, Any], causal: bool = False) -> tuple[Any]:
    mx = _mx()
    q, k, v = (inputs[n].astype(mx.float32) for n in ("q", "k", "v"))
    length, s_len = q.shape[2], k.shape[2]
    s = (q @ k.swapaxes(-1, -2)) / math.sqrt(q.shape[-1])
    if causal:
        i = mx.arange(length)[:, None]
        j = mx.arange(s_len)[None, :]
        s = mx.where(j <= i + (s_len - length), s, -mx.inf)
    p = mx.exp(s - s.max(axis=-1, keepdims=True))
    return ((p / p.sum(axis=-1, keepdims=True)) @ v,)


def _decode(inputs: dict[str, Any]) -> tuple[Any]:
    mx = _mx()
    q, k, v = (inputs[n].astype(mx.float32) for n in ("q", "k", "v"))
    groups = q.shape[1] // k.shape[1]
    k, v = mx.repeat(k, groups, axis=1), mx.repeat(v, groups, axis=1)
    s = (q @ k.swapaxes(-1, -2)) / math.sqrt(q.shape[-1])
    p = mx.exp(s - s.max(axis=-1, keepdims=True))
    return ((p / p.sum(axis=-1, keepdims=True)) @ v,)


def _native(ref_name: str, params: str = "") -> Baseline:
    # The baseline is the reference itself in MLX ops (speed is not what these tests judge).
    src = ("import math\nimport mlx.core as mx\n" + _SOURCES[ref_name] +
           f"\n\ndef run(**kw):\n    return _ref(kw{params})[0]\n")
    return Baseline("native", {"any": src}, "MLX ops")


_SOURCES = {
    "rowsum": "def _ref(i):\n    return (i['x'].astype(mx.float32).sum(axis=-1).astype(i['x'].dtype),)",
    "softmax": "def _ref(i):\n    return (mx.softmax(i['x'].astype(mx.float32), axis=-1).astype(i['x'].dtype),)",
    "rmsnorm": "def _ref(i):\n    x = i['x'].astype(mx.float32)\n"
               "    return ((x * mx.rsqrt((x * x).mean(axis=-1, keepdims=True) + 1e-5) * i['w']).astype(i['x'].dtype),)",
    "linrec": "def _ref(i):\n    a, b = i['a'], i['b']\n    h, o = mx.zeros(a.shape[:-1]), []\n"
              "    for t in range(a.shape[-1]):\n        h = a[..., t] * h + b[..., t]\n        o.append(h)\n"
              "    return (mx.stack(o, axis=-1).astype(a.dtype),)",
    "matmul": "def _ref(i):\n    return (i['a'] @ i['b'],)",
    "qkt": "def _ref(i):\n    return (i['q'] @ i['k'].T,)",
    "attention": "def _ref(i):\n    q, k, v = i['q'], i['k'], i['v']\n    causal = i.pop('causal', False)\n"
                 "    mask = 'causal' if causal else None\n"
                 "    return (mx.fast.scaled_dot_product_attention(q, k, v, scale=1 / math.sqrt(q.shape[-1]), mask=mask),)",
    "decode": "def _ref(i):\n    q, k, v = i['q'], i['k'], i['v']\n"
              "    return (mx.fast.scaled_dot_product_attention(q, k, v, scale=1 / math.sqrt(q.shape[-1])),)",
}


def _w(name: str, axes: dict[str, int], dtype: str, **params: Any) -> Workload:
    return Workload(name, axes, dtype, params=params, tier="gpu")


def _cpu(name: str, axes: dict[str, int], dtype: str, **params: Any) -> Workload:
    return Workload(name, axes, dtype, params=params, tier="cpu")


def make(name: str) -> Task:
    """The micro-task `name`: rowsum, softmax, rmsnorm, linrec, matmul, qkt, attention, decode."""
    rows = TensorSpec("x", ("rows", "cols"))
    common: dict[str, Any] = dict(flops=lambda w: 1.0, bytes_moved=lambda w: 1.0, tolerances=TOL,
                                  default_baseline="native", origin=name)
    if name == "rowsum":
        return Task("rowsum", "reduction", "out[r] = sum_c x[r, c]", [rows], [TensorSpec("out", ("rows",))],
                    [_w("g_256x4096_f32", {"rows": 256, "cols": 4096}, "float32"),
                     _w("g_100x1000_f32", {"rows": 100, "cols": 1000}, "float32"),
                     _cpu("c_64x512_f32", {"rows": 64, "cols": 512}, "float32")],
                    _rowsum, baselines={"native": _native("rowsum")}, **common)
    if name == "softmax":
        return Task("softmax_micro", "reduction", "row softmax", [TensorSpec("x", ("rows", "cols"), scale=3.0)],
                    [TensorSpec("out", ("rows", "cols"))],
                    [_w("g_128x3000_f32", {"rows": 128, "cols": 3000}, "float32"),
                     _w("g_64x4096_f16", {"rows": 64, "cols": 4096}, "float16"),
                     _cpu("c_64x512_f32", {"rows": 64, "cols": 512}, "float32")],
                    _softmax, baselines={"native": _native("softmax")}, **common)
    if name == "rmsnorm":
        return Task("rmsnorm_micro", "reduction", "rmsnorm", [rows, TensorSpec("w", ("cols",))],
                    [TensorSpec("out", ("rows", "cols"))],
                    [_w("g_128x2000_f32", {"rows": 128, "cols": 2000}, "float32"),
                     _w("g_64x4096_f16", {"rows": 64, "cols": 4096}, "float16"),
                     _cpu("c_64x512_f32", {"rows": 64, "cols": 512}, "float32")],
                    _rmsnorm, baselines={"native": _native("rmsnorm")}, **common)
    if name == "linrec":
        return Task("linrec", "scan", "h_t = a_t * h_{t-1} + b_t over the last axis",
                    [TensorSpec("a", ("rows", "len"), "float32", init="uniform"),
                     TensorSpec("b", ("rows", "len"), "float32", scale=0.1)],
                    [TensorSpec("h", ("rows", "len"), "float32")],
                    [_w("g_24x1000_f32", {"rows": 24, "len": 1000}, "float32"),
                     _w("g_8x3000_f32", {"rows": 8, "len": 3000}, "float32"),
                     _cpu("c_8x300_f32", {"rows": 8, "len": 300}, "float32")],
                    _linrec, baselines={"native": _native("linrec")}, **common)
    if name == "matmul":
        return Task("matmul", "matmul", "c = a @ b",
                    [TensorSpec("a", ("m", "k"), scale=0.5), TensorSpec("b", ("k", "n"), scale=0.5)],
                    [TensorSpec("c", ("m", "n"))],
                    [_w("g_f32_100x70x90", {"m": 100, "k": 70, "n": 90}, "float32"),
                     _w("g_f16_128x96x64", {"m": 128, "k": 96, "n": 64}, "float16"),
                     _cpu("c_f32_64x64x64", {"m": 64, "k": 64, "n": 64}, "float32")],
                    _matmul, baselines={"native": _native("matmul")}, **common)
    if name == "qkt":
        return Task("qkt", "attention", "scores = q @ k.T",
                    [TensorSpec("q", ("m", "d")), TensorSpec("k", ("n", "d"))], [TensorSpec("scores", ("m", "n"))],
                    [_w("g_100x64x130_f32", {"m": 100, "d": 64, "n": 130}, "float32"),
                     _cpu("c_32x64x32_f32", {"m": 32, "d": 64, "n": 32}, "float32")],
                    _qkt, baselines={"native": _native("qkt")}, **common)
    if name == "attention":
        qkv = [TensorSpec(n, ("b", "h", "l" if n == "q" else "s", "d")) for n in ("q", "k", "v")]
        return Task("attention_micro", "attention", "softmax(q k^T / sqrt(d)) v, causal lower-right",
                    qkv, [TensorSpec("o", ("b", "h", "l", "d"))],
                    [_w("g_causal_f32", {"b": 1, "h": 2, "l": 100, "s": 100, "d": 64}, "float32", causal=True),
                     _w("g_causal_short_q_f16", {"b": 2, "h": 2, "l": 40, "s": 130, "d": 64}, "float16", causal=True),
                     _w("g_full_f32", {"b": 1, "h": 3, "l": 70, "s": 90, "d": 64}, "float32", causal=False),
                     _cpu("c_causal_f32", {"b": 1, "h": 2, "l": 64, "s": 64, "d": 64}, "float32", causal=True)],
                    _attention, baselines={"native": _native("attention")}, **common)
    if name == "decode":
        return Task("decode_micro", "decode", "GQA decode attention, one query token",
                    [TensorSpec("q", ("b", "hq", "one", "d")), TensorSpec("k", ("b", "hkv", "s", "d")),
                     TensorSpec("v", ("b", "hkv", "s", "d"))], [TensorSpec("o", ("b", "hq", "one", "d"))],
                    [_w("g_f32", {"b": 2, "hq": 8, "hkv": 2, "one": 1, "s": 1000, "d": 64}, "float32"),
                     _w("g_f16", {"b": 1, "hq": 16, "hkv": 4, "one": 1, "s": 777, "d": 128}, "float16"),
                     _cpu("c_f32", {"b": 1, "hq": 4, "hkv": 1, "one": 1, "s": 256, "d": 64}, "float32")],
                    _decode, baselines={"native": _native("decode")}, **common)
    raise KeyError(name)


NAMES = ("rowsum", "softmax", "rmsnorm", "linrec", "matmul", "qkt", "attention", "decode")
