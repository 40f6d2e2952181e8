"""The Metal kernels of ksearch.kernels (run on the Metal emulation in test_metalemu_acceptance_kernels.py) pass clang with the project's MSL shim,
at every template configuration the dispatch code uses; and the dispatch picks them only when opted in."""

from __future__ import annotations

import pytest
from recorded_kernels import Calls, Made, record_kernels

from ksearch.kernels import device
from ksearch.kernels.attention import metal_fragments, metal_rows, metal_simdgroup
from ksearch.kernels.decode import metal_split_k
from ksearch.kernels.kernel_text import compact
from ksearch.knowledge.extract import KernelUse, TemplateArg
from ksearch.knowledge.metal_check import check_kernels, clang_path

needs_clang = pytest.mark.skipif(clang_path() is None, reason="clang not installed")


def _use(name: str, source: str, inputs: list[str], outputs: list[str], template: list[TemplateArg],
         out_dtypes: list[str] | None = None, in_dtypes: dict[str, str] | None = None) -> KernelUse:
    return KernelUse(dialect="metal", line=0, var=None, name=name, input_names=inputs, output_names=outputs,
                     source=source, output_dtypes=out_dtypes or ["T"] * len(outputs), template=template,
                     input_dtypes=in_dtypes or {})


SIZES = {"float16": 2, "float32": 4}


def _mma(d: int, causal: bool, crescale: bool = True, dtype: str = "float16") -> KernelUse:
    return _use(f"mma_{dtype}_d{d}_{int(causal)}{int(crescale)}", metal_simdgroup.SOURCE, ["q", "k", "v"], ["o"],
                [TemplateArg("T", "dtype", dtype), TemplateArg("D", "int", d),
                 TemplateArg("BK", "int", metal_simdgroup.block_keys(d, SIZES[dtype])),
                 TemplateArg("CAUSAL", "bool", causal), TemplateArg("CRESCALE", "bool", crescale)],
                [dtype], dict.fromkeys("qkv", dtype))


@needs_clang
def test_simdgroup_mma_prefill_passes_clang_at_every_configuration() -> None:
    kernels = [_mma(d, c, r, t) for d in (64, 128) for c in (False, True) for r in (True, False) for t in SIZES]
    errors = check_kernels(kernels)
    assert errors == [], [str(e) for e in errors or []]


@needs_clang
def test_a_broken_simdgroup_call_is_caught() -> None:
    # The check must be able to fail: an 8x8 matrix of int is not a simdgroup_matrix.
    bad = metal_simdgroup.SOURCE.replace("simdgroup_float8x8 s =", "simdgroup_matrix<int, 8, 8> s =", 1)
    k = _mma(64, False)
    k.source = bad
    assert check_kernels([k])


def _fragments(d: int, causal: bool, crescale: bool, bk: int, dtype: str = "float16") -> KernelUse:
    return _use(f"fragments_{dtype}_d{d}_{int(causal)}{int(crescale)}_{bk}", metal_fragments.SOURCE, ["q", "k", "v"],
                ["o"],
                [TemplateArg("T", "dtype", dtype), TemplateArg("D", "int", d), TemplateArg("BK", "int", bk),
                 TemplateArg("CAUSAL", "bool", causal), TemplateArg("CRESCALE", "bool", crescale)],
                [dtype], dict.fromkeys("qkv", dtype))


@needs_clang
def test_the_fragment_prefill_passes_clang_at_every_configuration() -> None:
    kernels = [_fragments(d, c, r, bk, t) for d in (64, 128) for c in (False, True) for r in (True, False)
               for t in SIZES for bk in {metal_fragments.block_keys(d, SIZES[t]), 16}]
    errors = check_kernels(kernels)
    assert errors == [], [str(e) for e in errors or []]
    # within Apple's 32 KB of threadgroup memory at its block sizes, float16 with room to spare
    assert all(metal_fragments.tg_bytes(d, metal_fragments.block_keys(d)) <= 24 * 1024 for d in (64, 128))
    assert [metal_fragments.block_keys(d, 4) for d in (64, 128)] == [32, 16]
    assert all(metal_fragments.tg_bytes(d, metal_fragments.block_keys(d, 4), 4) <= 32 * 1024 for d in (64, 128))


def test_block_keys_are_the_longest_blocks_that_fit_each_dtype() -> None:
    # float16 keeps the blocks its kernels were written with; float32's elements are twice as large
    assert [metal_simdgroup.block_keys(d, n) for n in (2, 4) for d in (64, 128)] == [32, 16, 16, 8]
    for d in (64, 128):
        for n in (2, 4):
            bk = metal_simdgroup.block_keys(d, n)
            assert metal_simdgroup.tg_bytes(d, bk, n) <= metal_simdgroup.TG_BYTES
            assert metal_simdgroup.tg_bytes(d, 2 * bk, n) > metal_simdgroup.TG_BYTES


@needs_clang
def test_a_fragment_element_of_the_wrong_type_is_caught() -> None:
    # The check must be able to fail there too: P's fragment elements are half; a pointer is no element.
    k = _fragments(128, True, True, 32)
    k.source = metal_fragments.SOURCE.replace("pf[j].thread_elements()[0] = T(p0);",
                                              "pf[j].thread_elements()[0] = &p0;", 1)
    assert k.source != metal_fragments.SOURCE and check_kernels([k])


@needs_clang
def test_row_and_decode_metal_kernels_pass_clang() -> None:
    f16 = TemplateArg("T", "dtype", "float16")
    kernels = [
        _use("rows", metal_rows.PREFILL_SOURCE, ["q", "k", "v"], ["o"],
             [f16, TemplateArg("D", "int", 128), TemplateArg("NT", "int", metal_rows.PREFILL_NT),
              TemplateArg("BN", "int", metal_rows.PREFILL_BN), TemplateArg("CAUSAL", "bool", True)]),
        _use("split", metal_split_k.DECODE_SPLIT_SOURCE, ["q", "k_cache", "v_cache", "meta"],
             ["part_acc", "part_ml"], [f16, TemplateArg("D", "int", 128), TemplateArg("G", "int", 4),
                                       TemplateArg("NW", "int", 4), TemplateArg("U", "int", 4)],
             ["float32", "float32"],
             in_dtypes={"meta": "int32"}),
        _use("one_split", metal_split_k.DECODE_ONE_SPLIT_SOURCE, ["q", "k_cache", "v_cache", "meta"], ["o"],
             [f16, TemplateArg("D", "int", 128), TemplateArg("G", "int", 4), TemplateArg("NW", "int", 4),
              TemplateArg("U", "int", 4)], in_dtypes={"meta": "int32"}),
        _use("merge", metal_split_k.DECODE_MERGE_SOURCE, ["part_acc", "part_ml"], ["o"],
             [f16, TemplateArg("D", "int", 128), TemplateArg("G", "int", 4)],
             in_dtypes={"part_acc": "float32", "part_ml": "float32"}),
        _use("merge_few", metal_split_k.DECODE_MERGE_FEW_SOURCE, ["part_acc", "part_ml"], ["o"],
             [f16, TemplateArg("D", "int", 128), TemplateArg("G", "int", 4), TemplateArg("NF", "int", 4)],
             in_dtypes={"part_acc": "float32", "part_ml": "float32"}),
    ]
    errors = check_kernels(kernels)
    assert errors == [], [str(e) for e in errors or []]


def test_metal_dispatch_is_opt_in_and_picks_by_dtype(monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib

    mx = pytest.importorskip("mlx.core")
    A = importlib.import_module("ksearch.kernels.attention")  # the module: the package re-exports the function

    monkeypatch.setattr(device, "backend", lambda: "metal")
    monkeypatch.setattr(metal_simdgroup, "attention_metal_mma", lambda *a: "mma")
    monkeypatch.setattr(metal_rows, "attention_metal", lambda *a: "rows")
    q16 = mx.zeros((1, 4, 8, 64), dtype=mx.float16)
    k16 = mx.zeros((1, 2, 8, 64), dtype=mx.float16)
    q32, k32 = q16.astype(mx.float32), k16.astype(mx.float32)
    qb, kb = q16.astype(mx.bfloat16), k16.astype(mx.bfloat16)
    monkeypatch.delenv("KSEARCH_METAL_KERNELS", raising=False)
    assert not isinstance(A.attention(q16, k16, k16), str)  # not opted in: MLX's own attention
    monkeypatch.setenv("KSEARCH_METAL_KERNELS", "1")
    assert A.attention(q16, k16, k16, causal=True) == "mma"
    assert A.attention(q32, k32, k32) == "mma"  # float32 on the matrix units at full precision
    assert A.attention(qb, kb, kb) == "rows"  # bfloat matrices need Metal 3.1: the row kernel
    with pytest.raises(TypeError, match="must share one dtype"):  # every kernel reads v as q's dtype
        A.attention(q32, k16.astype(mx.float32), k16)
    assert not isinstance(A.attention(q16[..., :48], k16[..., :48], k16[..., :48]), str)  # D=48: no kernel fits


def test_flash_simdgroup_family_sizes_match_the_threadgroup_limit() -> None:
    from ksearch.policy.templates import attention_metal_flash as F

    assert F.tg_bytes(128, metal_simdgroup.block_keys(128)) <= F.METAL_TG_BYTES  # the library's own choice
    # why the longer blocks are left out with S and P in threadgroup memory, and fit with them in registers
    assert F.tg_bytes(128, 32) > F.METAL_TG_BYTES and F.tg_bytes(64, 64) > F.METAL_TG_BYTES
    assert F.tg_bytes(128, 32, "registers") <= F.METAL_TG_BYTES and F.tg_bytes(64, 64, "registers") <= F.METAL_TG_BYTES
    params = F.FLASH_SIMDGROUP.all_params()
    assert params[0] == {"bk128": 16, "bk64": 32, "crescale": True, "constants": False, "softmax": "threadgroup",
                         "float32": "mma"}
    by_softmax = {kind: [p for p in params if p["softmax"] == kind] for kind in ("threadgroup", "registers")}
    assert len(by_softmax["threadgroup"]) == 48 and len(by_softmax["registers"]) == 96
    assert not any(p["bk128"] == 32 or p["bk64"] == 64 for p in by_softmax["threadgroup"])
    # float32's blocks: the float16 choice, at most the library's at four bytes, and always within 32 KB
    assert [F.float32_keys(128, bk) for bk in (16, 8)] == [8, 8] and F.float32_keys(64, 32) == 16
    assert F.float32_keys(128, 32, "registers") == 16 and F.float32_keys(64, 64, "registers") == 32
    for p in params:
        for d in (64, 128):
            assert F.tg_bytes(d, F.float32_keys(d, p[f"bk{d}"], p["softmax"]), p["softmax"], 4) <= F.METAL_TG_BYTES


@needs_clang
def test_flash_simdgroup_renderings_pass_clang_and_a_broken_one_does_not(monkeypatch: pytest.MonkeyPatch) -> None:
    from ksearch.knowledge.lint import check_metal_candidate
    from ksearch.policy.templates import attention_metal_flash as F
    from ksearch.tasks import get_task

    task = get_task("attention")
    for p in F.FLASH_SIMDGROUP.all_params():
        src = F.FLASH_SIMDGROUP.source(p)
        f32 = {d: F.float32_keys(d, p[f"bk{d}"], p["softmax"]) for d in (64, 128)}
        on_mma = p["float32"] == "mma"
        assert ("if q.dtype == f32" in src) == on_mma
        if p["constants"]:  # the kernels made at run time (tests/test_metal_family_constants.py runs them)
            for d in (64, 128):
                assert f'_kernel("mma", f16, {d}, bool(causal), {p[f"bk{d}"]})' in src
                assert (f'_kernel("mma", f32, {d}, bool(causal), {f32[d]})' in src) == on_mma
            assert src.count(f'("CRESCALE", {p["crescale"]})') == 1
        else:
            for d in (64, 128):
                assert f'("T", f16), ("D", {d}), ("BK", {p[f"bk{d}"]})' in src
                assert (f'("T", f32), ("D", {d}), ("BK", {f32[d]})' in src) == on_mma
            assert src.count(f'("CRESCALE", {p["crescale"]})') == (4 if on_mma else 2)
        kernel = metal_fragments.SOURCE if p["softmax"] == "registers" else metal_simdgroup.SOURCE
        assert repr(kernel) in src
        assert [str(d) for d in check_metal_candidate(src, task) if d.severity == "error"] == []
    bad = metal_simdgroup.SOURCE.replace("simdgroup_float8x8 s =", "simdgroup_matrix<int, 8, 8> s =", 1)
    monkeypatch.setattr(metal_simdgroup, "SOURCE", bad)
    errors = [d for d in check_metal_candidate(F.FLASH_SIMDGROUP.source(F.FLASH_SIMDGROUP.default()), task)
              if d.severity == "error"]
    assert errors  # the check reads the rendered kernel, and can fail


def _library_calls(monkeypatch: pytest.MonkeyPatch) -> tuple[Made, Calls]:
    """(kernels made, their calls) of the library's Metal prefill and decode at a few shapes, MLX's Metal kernel
    constructor recording them (no Metal here: each call hands back zeros)."""
    import mlx.core as mx

    caches = (metal_simdgroup._kernel, metal_rows._prefill_kernel, metal_split_k._decode_kernels)
    for c in caches:
        c.cache_clear()
    made, calls = record_kernels(monkeypatch, "metal_kernel")
    try:
        q, k = mx.zeros((1, 8, 64, 128), dtype=mx.float16), mx.zeros((1, 2, 64, 128), dtype=mx.float16)
        for _ in range(2):
            metal_simdgroup.attention_metal_mma(q, k, k, True)
            metal_rows.attention_metal(q.astype(mx.float32), k.astype(mx.float32), k.astype(mx.float32), False)
            qd, kc = mx.zeros((2, 8, 1, 64), dtype=mx.bfloat16), mx.zeros((2, 2, 600, 64), dtype=mx.bfloat16)
            metal_split_k.decode_metal(qd, kc, kc, 500)  # 4 splits: split and the one-read merge
            metal_split_k.decode_metal(qd, kc, kc, 600)  # 5 splits: split and the tiled merge
            metal_split_k.decode_metal(qd, kc, kc, 100)  # one split a (batch, kv head)
    finally:
        for c in caches:
            c.cache_clear()
    return made, calls


def test_the_library_makes_each_metal_kernel_once_a_set_with_its_arguments_as_constants(
        monkeypatch: pytest.MonkeyPatch) -> None:
    import mlx.core as mx

    from ksearch.kernels.kernel_text import metal_constant_lines

    made, calls = _library_calls(monkeypatch)
    assert len(made) == 6 and len(calls) == 14 and all("template" not in kw for _, kw in calls)
    by_source = {m["source"]: str(m["header"]) for m in made}
    assert by_source[compact(metal_simdgroup.SOURCE)] == metal_constant_lines(
        [("T", mx.float16), ("D", 128), ("BK", 16), ("CAUSAL", True), ("CRESCALE", metal_simdgroup.CRESCALE)])
    assert by_source[compact(metal_rows.PREFILL_SOURCE)] == metal_constant_lines(
        [("T", mx.float32), ("D", 128), ("NT", metal_rows.PREFILL_NT), ("BN", metal_rows.PREFILL_BN),
         ("CAUSAL", False)])
    split = [("T", mx.bfloat16), ("D", 64), ("G", 4), ("NW", 4), ("U", 1)]
    assert by_source[compact(metal_split_k.DECODE_SPLIT_SOURCE)] == metal_constant_lines(split)
    assert by_source[compact(metal_split_k.DECODE_ONE_SPLIT_SOURCE)] == metal_constant_lines(split)
    assert by_source[compact(metal_split_k.DECODE_MERGE_SOURCE)] == metal_constant_lines(split[:3])
    assert by_source[compact(metal_split_k.DECODE_MERGE_FEW_SOURCE)] == metal_constant_lines(
        [*split[:3], ("NF", metal_split_k.MERGE_FEW)])


@needs_clang
def test_the_metal_kernels_as_the_library_makes_them_pass_clang(monkeypatch: pytest.MonkeyPatch) -> None:
    # Their headers carry the constants; nothing is passed as a template argument.
    made, _calls = _library_calls(monkeypatch)
    types = {"meta": "int32", "part_acc": "float32", "part_ml": "float32"}
    kernels = []
    for m in made:
        inputs, outputs = list(m["input_names"]), list(m["output_names"])
        use = _use(str(m["name"]), str(m["source"]), inputs, outputs, [], [types.get(n, "T") for n in outputs],
                   in_dtypes={n: types.get(n, "T") for n in inputs})
        use.header = str(m["header"])
        kernels.append(use)
    errors = check_kernels(kernels)
    assert errors == [], [str(e) for e in errors or []]
    broken = kernels[0]
    broken.header = broken.header.replace("constant constexpr int D", "constant constexpr int DD")
    assert check_kernels([broken])  # the check can fail: without the constant the body does not compile
