"""The CUDA analyzer: what a .cu kernel uses, and how each piece carries over to an MLX dialect.

It scans the source with the `detect` regexes of data/concepts.yaml plus a few idiom detectors (tiling, online
softmax, scans, reductions), and returns a JSON-serialisable port context: findings with line numbers, the concept
rows and patterns that carry them over, and warnings for constructs without an equivalent (with the alternative).
`ksearch run --from-cuda` hands this dict to the policy; the offline proposer raises the priors of `patterns`.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from ksearch.backends import code_backend
from ksearch.errors import UsageError
from ksearch.files import file_problem, read_text
from ksearch.knowledge import by_id, load_concepts, load_patterns
from ksearch.knowledge.lint import BACKENDS
from ksearch.knowledge.lint_rules import line_of, strip_comments

FORM_KEY = {"mlx-cuda": "mlx_cuda", "mlx-metal": "metal", "mlx-cpu": "mlx_cuda"}

#: The file names the analyzer takes as CUDA source (`ksearch port`, `spec --from-cuda`, `run --from-cuda`).
CUDA_SUFFIXES = (".cu", ".cuh", ".cuda")


def cuda_suffix_problem(name: str) -> str | None:
    """Why a file of this name is not taken as CUDA source, as the end of a sentence naming it; None: it is."""
    if name.lower().endswith(CUDA_SUFFIXES):
        return None
    return "is not CUDA source: name a .cu, .cuh or .cuda file"


def read_cuda(path: str | Path, what: str, error: type[UsageError] = UsageError) -> str:
    """The text of a CUDA source a user named as `what`; anything else (a folder, a README, a Python file, bytes
    that are not UTF-8) raises `error`, one line naming the file, and is never analysed."""
    if (problem := file_problem(path) or cuda_suffix_problem(Path(path).name)) is not None:
        raise error(f"{what} {path} {problem}")
    return read_text(path, what, error)

# Idioms: (id, regexes that must ALL match somewhere, patterns that carry the idiom, kind hint, description).
IDIOMS: list[tuple[str, list[str], list[str], str, str]] = [
    ("shared_tiling", [r"__shared__[^;]*\[[^\]]+\]\s*\[", r"__syncthreads"],
     ["threadgroup_tiling", "double_buffering"], "matmul", "2-D shared-memory tiles with barriers"),
    ("tiled_matmul", [r"__shared__", r"for\s*\([^)]*;[^)]*<[^)]*;[^)]*\+=\s*\w+\s*\)", r"\+=\s*\w+\s*\[[^\]]*\]\s*(\[[^\]]*\])?\s*\*\s*\w+\s*\["],
     ["threadgroup_tiling", "loop_unrolling", "tensor_core_mma"], "matmul", "a tiled multiply-accumulate loop"),
    ("online_softmax", [r"(fmaxf|max)\s*\(\s*m\w*", r"(__expf|expf|exp2f|exp)\s*\(\s*m\w*\s*-\s*m\w*",
                        r"\w+\s*\*\s*(corr|alpha|rescale|scale_old)\w*\s*\+"],
     ["online_softmax", "exp2_trick"], "attention", "running max / rescaled sum (online softmax)"),
    ("attention", [r"(softmax|attn|attention|scores?|qk|q_)", r"(k_|key|K\[|kv)"],
     ["online_softmax", "threadgroup_tiling", "k_transposition", "causal_block_skipping"], "attention",
     "an attention kernel (Q K^T, softmax, P V)"),
    ("causal", [r"(causal|is_causal|CAUSAL|mask)"], ["causal_block_skipping"], "attention", "a causal mask"),
    ("warp_reduction", [r"__shfl_(xor|down)_sync"], ["simd_register_reduction"], "reduction",
     "warp-shuffle reduction"),
    ("block_reduction", [r"__shared__", r"(>>=\s*1|/=\s*2)", r"__syncthreads"],
     ["simd_register_reduction", "block_per_row"], "reduction", "a shared-memory tree reduction"),
    ("scan", [r"(scan|prefix|cumsum|__shfl_up_sync|recurrence|selective)"],
     ["warp_level_scan", "chunked_scan_carried_prefix", "blelloch_scan", "hillis_steele_scan"], "scan",
     "a prefix scan / recurrence"),
    ("selective_scan", [r"(delta|dt)\b", r"\bA\b|A_", r"(exp2f|expf|__expf)"],
     ["chunked_scan_carried_prefix", "warp_level_scan", "fused_epilogue"], "scan",
     "a selective-scan style recurrence (exp(dt*A) decay)"),
    ("vector_loads", [r"\b(float4|half2|__half2|int4|uint4)\b"], ["vectorized_loads"], "", "vectorised memory access"),
    ("unroll", [r"#\s*pragma\s+unroll"], ["loop_unrolling"], "", "unrolled loops"),
    ("split_kv", [r"(split|num_splits|partition|lse)"], ["split_k_decode_lse_merge"], "decode",
     "a split sequence axis merged with log-sum-exp"),
    ("gqa", [r"(num_kv_heads|kv_head|n_kv|group_size|hkv|Hkv|gqa)"], ["gqa_head_grouping"], "decode",
     "grouped-query heads"),
    ("tensor_cores", [r"(mma\.sync|wmma::|wgmma|ldmatrix)"], ["tensor_core_mma"], "matmul", "tensor-core MMA"),
    ("async_copy", [r"(cp\.async|memcpy_async|cp\.async\.bulk)"], ["double_buffering"], "", "asynchronous copies"),
    ("epilogue", [r"(bias|relu|gelu|silu|sigmoid|residual|\*\s*w\[|weight\[)"], ["fused_epilogue"], "",
     "an elementwise epilogue"),
]


CONCEPT_PATTERNS = {
    "warp_reduce": ["simd_register_reduction"], "warp_scan": ["warp_level_scan"], "exp2_scaling": ["exp2_trick"],
    "cp_async": ["double_buffering"], "tma": ["double_buffering"], "mma_sync": ["tensor_core_mma"],
    "wmma": ["tensor_core_mma"], "wgmma": ["tensor_core_mma"], "ldmatrix": ["tensor_core_mma"],
    "vectorized_loads": ["vectorized_loads"], "pragma_unroll": ["loop_unrolling"],
}
NO_TARGET = ("none", "not available", "not practical")


def _expand_constants(code: str) -> str:
    """Integer macros and constexprs substituted (same line count), so `float t[TILE][TILE]` reads as numbers."""
    consts = dict(re.findall(r"#\s*define\s+(\w+)\s+(\d+)\s*$", code, flags=re.M))
    for decl in re.findall(r"constexpr\s+(?:int|unsigned)\s+([^;]+);", code):
        for part in decl.split(","):
            m = re.fullmatch(r"\s*(\w+)\s*=\s*(\d+)\s*", part)
            if m:
                consts[m.group(1)] = m.group(2)
    if not consts:
        return code
    names = re.compile(r"\b(" + "|".join(map(re.escape, consts)) + r")\b")
    return "\n".join(line if line.lstrip().startswith("#") or "constexpr" in line
                     else names.sub(lambda m: consts[m.group(1)], line) for line in code.split("\n"))


def _kernels(text: str) -> list[dict[str, Any]]:
    out = []
    for m in re.finditer(r"(?:template\s*<[^>]*>\s*)?__global__\s+(?:void\s+)?(?:__launch_bounds__\s*\([^)]*\)\s*)?"
                         r"(?:void\s+)?(\w+)\s*\(", text):
        out.append({"name": m.group(1), "line": line_of(text, m.start())})
    return out


def analyze_cuda(text: str, backend: str = "mlx-cuda") -> dict[str, Any]:
    """Port context for a CUDA source on `backend`: findings, concepts, patterns (a list of ids), warnings."""
    if backend not in BACKENDS:
        raise ValueError(f"unknown backend {backend!r}; choose one of {', '.join(BACKENDS)}")
    backend = code_backend(backend)
    code = _expand_constants(strip_comments(text))
    concepts = by_id(load_concepts())
    pattern_ids = {p["id"] for p in load_patterns() if backend in p["backends"]}
    findings: list[dict[str, Any]] = []
    warnings: list[dict[str, Any]] = []
    concept_hits: list[str] = []
    for cid, row in concepts.items():
        lines: list[int] = []
        for pattern in row.get("detect", []):
            lines += [line_of(code, m.start()) for m in re.finditer(pattern, code)]
        if not lines:
            continue
        concept_hits.append(cid)
        first = min(lines)
        target = row["metal"] if backend == "mlx-metal" else row["mlx_cuda"]
        findings.append({"concept": cid, "title": row["title"], "line": first, "lines": sorted(set(lines))[:20],
                         "cuda": row["cuda"], "target": target, "constraints": row.get("constraints", [])})
        no_equiv = row.get("equivalent") == "none" or str(target).lower().startswith(NO_TARGET)
        if no_equiv and backend != "mlx-cpu":
            alt = row.get("alternative") or row["metal"]
            warnings.append({"concept": cid, "line": first,
                             "message": f"{row['title']} has no equivalent on {backend}: {alt}"})
    idioms, suggested, kinds = [], [], []
    for iid, regexes, pats, kind, desc in IDIOMS:
        matches = [re.search(r, code) for r in regexes]
        if all(matches):
            line = min(line_of(code, m.start()) for m in matches if m)
            idioms.append({"idiom": iid, "line": line, "description": desc})
            suggested += [p for p in pats if p not in suggested]
            if kind:
                kinds.append(kind)
    # Distinctive concepts name their pattern directly (common ones such as __shared__ say too little).
    for cid in concept_hits:
        suggested += [p for p in CONCEPT_PATTERNS.get(cid, []) if p not in suggested]
    if backend == "mlx-cpu":
        warnings.append({"concept": "kernel_launch", "line": 1, "message": "MLX has no custom kernels on the CPU "
                         "backend: port the computation with MLX ops (mx.compile, chunked scans, blocked attention)"})
        cpu = {"attention": ["blocked_attention_ops", "fused_expression"], "scan": ["chunked_scan_ops"],
               "decode": ["fused_expression"], "reduction": ["mx_compile_fusion", "fused_expression"]}
        suggested = [p for k in kinds for p in cpu.get(k, [])] + ["mx_compile_fusion"]
    patterns = [p for p in dict.fromkeys(suggested) if p in pattern_ids]
    kind = max(set(kinds), key=kinds.count) if kinds else "unknown"
    return {
        "backend": backend,
        "kernels": _kernels(code),
        "kind_guess": kind,
        "findings": sorted(findings, key=lambda f: f["line"]),
        "idioms": sorted(idioms, key=lambda i: i["line"]),
        "concepts": sorted(concept_hits),
        "patterns": patterns,
        "warnings": sorted(warnings, key=lambda w: w["line"]),
        "summary": _summary(backend, kind, patterns, warnings),
    }


def _summary(backend: str, kind: str, patterns: list[str], warnings: list[dict[str, Any]]) -> str:
    text = f"Kind: {kind}. Carry it to {backend} with: {', '.join(patterns) or 'no specific pattern'}."
    if warnings:
        text += f" {len(warnings)} construct(s) have no direct equivalent (see warnings)."
    return text
