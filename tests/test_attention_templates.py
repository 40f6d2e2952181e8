"""The attention / gqa_decode template families: every rendering is a valid candidate; CPU renderings pass the harness
on mlx-cpu; CUDA kernel bodies compile for sm_90a under an MLX-like wrapper (skipped without nvcc)."""

from __future__ import annotations

import ast
import importlib
import importlib.util
import itertools

import pytest
from full import FULL, spread

from ksearch.backends.nvcc import compile_check, nvcc_path, wrap
from ksearch.kernels.attention import metal_rows, mma_sync
from ksearch.kernels.cuda_headers import MMA_SYNC_HEADER
from ksearch.kernels.decode import cuda_split_k_text, metal_split_k
from ksearch.policy.templates import attention as attn_t
from ksearch.policy.templates import gqa_decode as dec_t

PATTERNS = {"threadgroup_tiling", "online_softmax", "k_transposition", "exp2_trick", "simd_register_reduction",
            "vectorized_loads", "double_buffering", "loop_unrolling", "split_k_decode_lse_merge", "gqa_head_grouping",
            "tensor_core_mma", "causal_block_skipping", "fused_epilogue", "blocked_attention_ops",
            "mx_compile_fusion"}
FAMILIES = attn_t.FAMILIES + dec_t.FAMILIES


def test_families_cover_every_backend_and_name_known_patterns():
    for task in ("attention", "gqa_decode"):
        backends = {b for f in FAMILIES if task in f.tasks for b in f.backends}
        assert backends == {"mlx-cuda", "mlx-metal", "mlx-cpu"}
    for fam in FAMILIES:
        assert set(fam.patterns) <= PATTERNS, fam.id


@pytest.mark.parametrize("fam", FAMILIES, ids=lambda f: f.id)
def test_every_rendering_is_a_python_candidate(fam):
    # The split-K decode family has about 24,000 renderings (77 s on a CI core): `make test` parses an even spread of
    # 2,000 of each family's, `make test-full` (KSEARCH_TEST_FULL=1) every one.
    for params in spread(list(fam.all_params()), 2000):
        src = fam.source(params)
        tree = ast.parse(src)
        assert any(isinstance(n, ast.FunctionDef) and n.name == "run" for n in tree.body)
        assert "scaled_dot_product_attention" not in src


def _cpu_samples():
    out = []
    for fam in FAMILIES:
        if "mlx-cpu" in fam.backends:
            extra = {"split": 256, "compile": True} if "split" in fam.params else {"q_block": 64, "gqa": "grouped"}
            out += [(fam, fam.default()), (fam, {**fam.default(), **extra, "softmax": "mx"})]
    return out


@pytest.mark.slow
@pytest.mark.parametrize("fam,params", _cpu_samples(), ids=lambda x: getattr(x, "id", str(x)))
def test_cpu_family_passes_the_harness(cpu_backend, fam, params):
    from ksearch.harness import EvalOptions, evaluate
    from ksearch.tasks import get_task

    # A generous limit: CI machines with two shared cores are slow to start the harness's worker processes.
    result = evaluate(get_task(fam.tasks[0]), fam.source(params), cpu_backend,
                      EvalOptions(baseline=None, timeout_s=600))
    assert result.status == "passed", result.message


def _decode_units() -> list[str]:
    ins = [("q", "T"), ("k", "T"), ("v", "T")]
    outs = [("part_acc", "float32"), ("part_ml", "float32")]
    units = []
    fam = next(f for f in dec_t.FAMILIES if f.id == "gqa_decode.cuda.split_k")
    combos = {(p["warps"], p["unroll"], p["prefetch"], 4 if p["group_heads"] else 1) for p in fam.all_params()}
    for i, (w, u, pf, g) in enumerate(spread(sorted(combos), 4)):
        units.append(wrap(f"split{i}", cuda_split_k_text.SPLIT_SOURCE, "", ins, outs,
                          [("T", "float16"), ("D", 128), ("G", g), ("NW", w), ("U", u), ("PREFETCH", pf)]))
    for i, (ring, u, dt, d, g) in enumerate(spread([(3, 2, "float16", 128, 4), (4, 2, "bfloat16", 64, 8),
                                                    (2, 4, "float16", 128, 4)], 2)):
        units.append(wrap(f"ring{i}", cuda_split_k_text.SPLIT_RING_SOURCE, "", ins, outs,
                          [("T", dt), ("D", d), ("G", g), ("NW", 4), ("U", u), ("PREFETCH", True), ("RING", ring)]))
    for k, (dt, d) in enumerate(spread(list(itertools.product(("float16", "bfloat16"), (64, 128))), 2)):
        units.append(wrap(f"split_{dt}_{d}", cuda_split_k_text.SPLIT_SOURCE, "", ins, outs,
                          [("T", dt), ("D", d), ("G", 4), ("NW", 4), ("U", 4), ("PREFETCH", True)]))
        units.append(wrap(f"merge_{dt}_{d}", cuda_split_k_text.MERGE_SOURCE, "", outs, [("o", "T")],
                          [("T", dt), ("D", d), ("G", 4)]))
        units.append(wrap(f"merge_few_{dt}_{d}", cuda_split_k_text.MERGE_FEW_SOURCE, "", outs, [("o", "T")],
                          [("T", dt), ("D", d), ("G", 4), ("NF", 4)]))
        for g in ((1, 8), (4,))[k % 2]:  # the fused merge's lanes cover G x D / 4 float4s: under a warp to 8 a lane
            units.append(wrap(f"fused_{dt}_{d}_{g}", cuda_split_k_text.FUSED_SOURCE, "", ins, [("o", "T"), ("work", "float32")],
                              [("T", dt), ("D", d), ("G", g), ("NW", 4), ("U", 4), ("PREFETCH", True)]))
    return [cuda_split_k_text.HEADER, *units]


def _flash_units() -> list[str]:
    fam = next(f for f in attn_t.FAMILIES if f.id == "attention.cuda.flash_mma")
    units = []
    # Every configuration at fp16 / D 128; the default at every dtype and head dim (each instance costs seconds).
    combos = [(p, "float16", 128, c) for p in fam.all_params() for c in (False, True)]
    combos += [(fam.default(), dt, d, c) for dt in ("float16", "bfloat16") for d in (64, 128) for c in (False, True)]
    for i, (p, dt, d, causal) in enumerate(spread(combos, 6)):
        units.append(wrap(f"flash{i}", mma_sync.SOURCE, "", [("q", "T"), ("k", "T"), ("v", "T"),
                                                                   ("scale", "float32")], [("o", "T")],
                          [("T", dt), ("D", d), ("BM", p["bm"]), ("BN", p["bn"]), ("CAUSAL", causal),
                           ("DB", p["db"])]))
    return [MMA_SYNC_HEADER, *units]


def _row_tiled_units() -> list[str]:
    fam = next(f for f in attn_t.FAMILIES if f.id == "attention.cuda.row_tiled")
    units = []
    # Every switch at 128 threads in fp16; other block sizes and fp32 at the tiled, exp2, skipping setting.
    combos = [(p, "float16") for p in fam.all_params() if p["threads"] == 128]
    combos += [(p, dt) for p in fam.all_params() for dt in ("float16", "float32")
               if p["tile"] and p["exp2"] and p["skip"] and p["bn"] == 32 and (p["threads"] != 128 or dt == "float32")]
    for i, (p, dt) in enumerate(spread(combos, 6)):
        units.append(wrap(f"rows{i}", attn_t.ROW_TILED_SOURCE, "", [("q", "T"), ("k", "T"), ("v", "T"),
                                                                     ("scale", "float32")], [("o", "T")],
                          [("T", dt), ("HEAD_DIM", 128), ("CAUSAL", True), ("NT", p["threads"]), ("BN", p["bn"]),
                           ("TILE", p["tile"]), ("EXP2", p["exp2"]), ("SKIP", p["skip"])]))
    return units


@pytest.mark.slow
@pytest.mark.skipif(nvcc_path() is None, reason="nvcc not installed")
@pytest.mark.parametrize("units", [_decode_units, _flash_units, _row_tiled_units], ids=lambda f: f.__name__)
def test_cuda_kernels_compile_for_sm90a(units):
    ok, log = compile_check(units())
    assert ok, log[-3000:]
    # The tuned kernels keep everything in registers; the row-per-thread family spills like the naive starter.
    if units is not _row_tiled_units:
        assert "bytes spill" not in log.replace(" 0 bytes spill", ""), "register spills"


def _gpu_renders():
    out = []
    for fam in FAMILIES:
        for backend in ("mlx-cuda", "mlx-metal"):
            if backend in fam.backends:
                params = fam.all_params()
                out += [(fam, backend, fam.default())]
                # The last rendering too, but the split-K decode's (8 steps in flight: 28 s of nvcc, the slowest
                # linter check) only under KSEARCH_TEST_FULL=1; test_cuda_kernels_compile_for_sm90a compiles its
                # kernel at a spread of unrolls in `make test`.
                if FULL or fam.id != "gqa_decode.cuda.split_k":
                    out += [(fam, backend, params[-1])]
                # The shared-memory ring renders a second split kernel and a choice between the two (the first such
                # rendering: one key a lane a step, the quickest to compile; the compile test covers larger steps).
                ringed = [p for p in params if p.get("ring")]
                out += [(fam, backend, ringed[0])] if ringed else []
                # persistent blocks: a grid sized by the driver's SM count, one row of blocks
                persistent = [p for p in params if p.get("persist")]
                out += [(fam, backend, persistent[0])] if persistent else []
                # the library's tensor-core decode beside split-K (its kernels compiled with their header)
                tensor_cores = [p for p in params if p.get("mma")]
                out += [(fam, backend, tensor_cores[0])] if tensor_cores else []
                # kernels with their template arguments as constants in headers built at run time
                constants = [p for p in params if p.get("constants") and fam.valid(p)
                             and (p.get("tma") or (p.get("mma") and p.get("ring")))]
                out += [(fam, backend, constants[0])] if constants else []
    return out


@pytest.mark.slow
@pytest.mark.skipif(importlib.util.find_spec("ksearch.knowledge.lint") is None, reason="no linter yet")
@pytest.mark.parametrize("fam,backend,params", _gpu_renders(), ids=lambda x: getattr(x, "id", str(x)))
def test_gpu_renders_pass_the_project_linter(fam, backend, params):
    lint = importlib.import_module("ksearch.knowledge.lint")
    from ksearch.tasks import get_task

    check = getattr(lint, "check_cuda_candidate" if backend == "mlx-cuda" else "check_metal_candidate", None)
    if check is None:
        pytest.skip("the project linter has no deep check for this dialect yet")
    diags = check(fam.source(params), get_task(fam.tasks[0]))
    errors = [str(d) for d in diags if d.severity == "error"]
    assert not errors, errors


@pytest.mark.parametrize("src", [metal_split_k.DECODE_SPLIT_SOURCE, metal_split_k.DECODE_ONE_SPLIT_SOURCE,
                                 metal_split_k.DECODE_MERGE_SOURCE, metal_rows.PREFILL_SOURCE])
def test_metal_sources_use_the_metal_dialect(src):
    # No Metal compiler here: at least balanced braces and no CUDA-only spellings.
    assert src.count("{") == src.count("}") and src.count("(") == src.count(")")
    for cuda_only in ("__syncthreads", "__shfl", "blockIdx", "threadIdx", "__shared__", "expf(", "exp2f("):
        assert cuda_only not in src


