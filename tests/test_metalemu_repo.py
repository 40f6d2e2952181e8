"""The Metal code of this repository through the CPU engine of the Metal emulation: every Metal kernel (library,
task starters, the default rendering of every Metal template family, the knowledge base's exemplars) translates and
passes clang as one source (kernel instantiations analysed, no code generated); the softmax starter and the
simdgroup_matrix FlashAttention kernel run and match numpy. The full judged runs (every kernel against MLX, every
starter through `ksearch eval`) are the mlx-metal-emu acceptance tests."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import numpy as np
import pytest
from metalemu_source import mlx_buffers, mlx_source

from ksearch.knowledge import load_patterns
from ksearch.knowledge.extract import KernelUse, find_kernels
from ksearch.knowledge.metal_check import clang_path
from ksearch.policy.templates import all_families, render

pytestmark = pytest.mark.skipif(clang_path() is None, reason="the Metal emulation needs clang++")

ROOT = Path(__file__).resolve().parent.parent / "src" / "ksearch"
sys.path.insert(0, str(Path(__file__).parent / "data" / "cuda"))

# Template values the kernels take from shapes at call time (the static extractor cannot see them).
DEFAULTS = {"D": 64, "HEAD_DIM": 64, "MAXD": 64, "BK": 32, "N": 16, "MAX_N": 16, "CH": 8, "NCH": 32, "K": 4, "R": 4,
            "CPB": 4, "G": 4, "NW": 4, "NT": 64, "BN": 16, "TPB": 256, "THREADS": 256, "TILE": 16, "ITEMS": 4,
            "NSPLIT": 8, "U": 2}
BOOLS = {"Y_BLD"}


def repo_metal_kernels() -> list[tuple[str, KernelUse]]:
    from exemplar_candidates import candidate

    # kernels/kernel_text.py only passes other modules' text on to MLX (its call has no kernel of its own)
    sources = {str(p.relative_to(ROOT)): p.read_text() for p in sorted(ROOT.rglob("*.py"))
               if ("kernels" in p.parts or "starters" in p.parts) and "metal_kernel(" in p.read_text()
               and p.name != "kernel_text.py"}
    for fam in all_families():
        if "mlx-metal" in fam.backends:
            sources[f"template {fam.id}"] = render(fam.id, fam.default())
    for pat in load_patterns():
        body = (pat.get("exemplars") or {}).get("metal")
        if body:
            sources[f"exemplar {pat['id']}"] = candidate(pat["id"], body, "metal")
    return [(where, k) for where, src in sources.items() for k in find_kernels(src) if k.dialect == "metal"]


def _as_mlx_source(k: KernelUse, tag: str) -> str:
    tmpl: list[tuple[str, object]] = []
    for t in k.template:
        if t.kind == "bool" or t.name in BOOLS:
            tmpl.append((t.name, bool(t.value) if t.value is not None else True))
        elif t.kind == "int" or (t.name != "T" and t.name in DEFAULTS):
            tmpl.append((t.name, int(t.value) if isinstance(t.value, int) else DEFAULTS[t.name]))
        else:
            tmpl.append((t.name, t.value if t.value not in (None, "T") else "float16"))

    def dtype(d: str | None) -> str:
        return "float16" if d in (None, "T") else d

    inputs = {n: np.zeros(16, dtype(k.input_dtypes.get(n))) for n in k.input_names}
    outs = {n: dtype(k.output_dtypes[j] if j < len(k.output_dtypes) else None) for j, n in enumerate(k.output_names)}
    assert k.source is not None, k.unresolved
    return mlx_source(f"{k.name}_{tag}", inputs, outs, k.source, header=k.header, template=tmpl)[0]


def test_every_metal_kernel_of_the_repo_translates_and_compiles() -> None:
    from ksearch.metalemu.compile import check

    kernels = repo_metal_kernels()
    where = {w.split(" ")[0].split("/")[0] for w, _ in kernels}
    assert {"kernels", "tasks", "template", "exemplar"} <= where and len(kernels) >= 30
    tr = check("\n".join(_as_mlx_source(k, str(i)) for i, (_, k) in enumerate(kernels)))
    assert len(tr.entries) == len(kernels)


def _starter_body(name: str) -> str:
    k = next(k for k in find_kernels((ROOT / "tasks" / "starters" / name).read_text()) if k.dialect == "metal")
    assert k.source is not None
    return k.source


def test_softmax_starter_runs() -> None:
    from ksearch.metalemu.cpu import run_kernel

    body = _starter_body("softmax_metal.py")
    x = (np.random.default_rng(0).standard_normal((100, 300)) * 3).astype(np.float32)
    out = np.zeros_like(x)
    src, host = mlx_source("softmax_naive", {"x": x}, {"out": "float32"}, body, template=[("T", "float32")])
    run_kernel(src, host, mlx_buffers({"x": x}, {"out": out}, body), (100, 1, 1), (64, 1, 1))
    e = np.exp(x - x.max(1, keepdims=True))
    np.testing.assert_allclose(out, e / e.sum(1, keepdims=True), rtol=1e-5, atol=1e-7)


def test_simdgroup_matrix_flash_attention_runs() -> None:
    from ksearch.kernels.attention.metal_simdgroup import BQ, NT, SOURCE, block_keys
    from ksearch.metalemu.cpu import run_kernel

    b, hq, hkv, length, d = 1, 2, 1, 40, 64
    rng = np.random.default_rng(1)
    q, k, v = (rng.standard_normal((b, h, length, d)).astype(np.float16) for h in (hq, hkv, hkv))
    o = np.zeros_like(q)
    arrays = {"q": q, "k": k, "v": v}
    src, host = mlx_source("ks_attention_simdgroup_mma", arrays, {"o": "float16"}, SOURCE,
                           template=[("T", "float16"), ("D", d), ("BK", block_keys(d)), ("CAUSAL", True),
                                     ("CRESCALE", True)])
    run_kernel(src, host, mlx_buffers(arrays, {"o": o}, SOURCE), (math.ceil(length / BQ) * NT, b * hq, 1),
               (NT, 1, 1))
    qf, kf, vf = (a.astype(np.float32) for a in (q, k, v))
    s = qf @ np.repeat(kf, hq // hkv, axis=1).transpose(0, 1, 3, 2) / math.sqrt(d)
    s = np.where(np.tril(np.ones((length, length), bool)), s, -np.inf)
    p = np.exp(s - s.max(-1, keepdims=True))
    ref = (p / p.sum(-1, keepdims=True)) @ np.repeat(vf, hq // hkv, axis=1)
    np.testing.assert_allclose(o.astype(np.float32), ref, atol=2e-2, rtol=2e-2)
