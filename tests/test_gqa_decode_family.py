"""The gqa_decode CUDA family's tensor-core choice (`mma`): the candidate carries the library's kernel texts, launch
arithmetic and dispatch rule, so that a search can reach what `decode()` runs on Hopper."""

import contextlib
import importlib

import mlx.core as mx
import pytest
from recorded_kernels import record_kernels

from ksearch.kernels.decode import cuda_cluster as DC
from ksearch.kernels.decode import cuda_split_k_text
from ksearch.kernels.decode.cuda_split_k import MERGE_FEW
from ksearch.kernels.kernel_text import compact, constant_lines

kd = importlib.import_module("ksearch.kernels.decode")
dec_t = importlib.import_module("ksearch.policy.templates.gqa_decode")
FAM = next(f for f in dec_t.FAMILIES if f.id == "gqa_decode.cuda.split_k")


def _candidate(params: dict, monkeypatch: pytest.MonkeyPatch) -> dict:
    """The rendered candidate's module, executed here: MLX on the CPU has no CUDA kernels, so their constructor hands
    back stubs (a launch through one fails the test)."""
    def no_launch(**_kw: object) -> None:
        raise AssertionError("a CUDA kernel launched on the CPU")

    monkeypatch.setattr(mx.fast, "cuda_kernel", lambda **_kw: no_launch)
    namespace: dict = {}
    exec(compile(FAM.source(params), "candidate", "exec"), namespace)  # noqa: S102 - our own rendering
    return namespace


def test_off_by_default_and_realised_by_the_tensor_core_pattern(monkeypatch):
    import random

    assert FAM.default()["mma"] == 0 and "_mma" not in _candidate(FAM.default(), monkeypatch)
    assert "tensor_core_mma" in FAM.patterns
    assert FAM.realise("tensor_core_mma", FAM.default(), random.Random(0))["mma"] == 64


def test_each_decode_pattern_sets_the_parameters_that_make_it():
    # Split-K must split: target_blocks 1 is one block a head (a search kept it for 24 evaluations on the H200).
    import random

    from ksearch.knowledge import load_patterns

    known = {p["id"] for p in load_patterns()}
    for fam in dec_t.FAMILIES:
        assert set(fam.pattern_params) <= set(fam.patterns) <= known, fam.id
    realised = FAM.realise("split_k_decode_lse_merge", FAM.default(), random.Random(0))
    assert realised["target_blocks"] >= 528 and FAM.valid(realised)
    assert FAM.realise("gqa_head_grouping", FAM.default(), random.Random(0))["group_heads"] is True
    assert FAM.realise("loop_unrolling", FAM.default(), random.Random(0))["unroll"] >= 2
    metal = next(f for f in dec_t.FAMILIES if f.id == "gqa_decode.metal.split_k")
    assert metal.realise("split_k_decode_lse_merge", metal.default(), random.Random(0))["target_blocks"] >= 128


def test_the_rendering_carries_the_librarys_texts_and_launch(monkeypatch):
    cand = _candidate({**FAM.default(), "mma": 256}, monkeypatch)
    cfg = kd.MMA_DEFAULT
    assert cand["MMA_HEADER"] == compact(DC.header(cfg, 1))
    assert cand["MMA_ONE"] == compact(DC.SOURCE) and cand["MMA_PARTS"] == compact(DC.PARTS_SOURCE)
    assert cfg.few_merge and cand["MERGE_FEW"] == cuda_split_k_text.MERGE_FEW_SOURCE
    source = FAM.source({**FAM.default(), "mma": 256})
    assert f"shared_memory={cfg.smem_bytes(128, 4)}" in source
    for cs in (0, 1):  # the library's template arguments, in its order
        want = ", ".join(f'("{k}", {v})' for k, v in DC.template("T", 128, 4, cfg, cs)[1:])
        assert want in source, want
    assert cand["_HOPPER"] is False  # this machine: the split-K path, which runs everywhere


@pytest.mark.parametrize("b,length", [(8, 16384), (16, 4096), (16, 32768), (9, 20000), (64, 3000)])
def test_its_splits_are_the_librarys(b, length, monkeypatch):
    """The candidate's `_mma` launches what the library's dispatch launches: one split a pair (the output written by
    the block) or the same split count and merge (the one-read merge at most MERGE_FEW splits)."""
    cand = _candidate({**FAM.default(), "mma": 256}, monkeypatch)
    calls = []
    for name in ("_mma_one", "_mma_parts", "_mma_merge", "_mma_merge_few"):
        monkeypatch.setitem(cand, name, lambda name=name, **kw: calls.append((name, kw)) or [mx.zeros((1,))] * 2)
    q = mx.zeros((b, 32, 1, 128), dtype=mx.float16)
    kc = mx.zeros((b, 8, length, 128), dtype=mx.float16)
    cand["_mma"](q, kc, kc, length)
    ns = DC.wave_splits(b * 8, length, 128, 4, kd.MMA_DEFAULT)
    if ns == 1:
        assert [c[0] for c in calls] == ["_mma_one"] and calls[0][1]["grid"] == (b * 8 * 128, 1, 1)
    else:
        merge = "_mma_merge_few" if ns <= MERGE_FEW else "_mma_merge"
        assert [c[0] for c in calls] == ["_mma_parts", merge] and calls[0][1]["grid"] == (b * 8 * 128, ns, 1)


def test_the_rule_is_the_librarys(monkeypatch):
    """Where the candidate takes the tensor-core kernel on Hopper: more than 64 MiB of K/V, D 128 and G 4, as
    decode.mma_takes (which also takes other G)."""
    cand = _candidate({**FAM.default(), "mma": 64}, monkeypatch)
    monkeypatch.setitem(cand, "_HOPPER", True)
    took = []
    monkeypatch.setitem(cand, "_mma", lambda *a: took.append(a) or "mma")
    for b, hkv, length, d, want in [(1, 8, 16384, 128, False), (1, 8, 16385, 128, True), (1, 8, 32768, 128, True),
                                    (16, 8, 16384, 64, False), (8, 8, 4096, 128, True), (1, 2, 65536, 128, False)]:
        q = mx.zeros((b, 4 * hkv, 1, d), dtype=mx.float16)
        kc = mx.zeros((b, hkv, length + 16, d), dtype=mx.float16)
        took.clear()
        with contextlib.suppress(AssertionError):  # the split-K path: no CUDA kernel launches here
            cand["run"](q, kc, kc, length)
        assert bool(took) == want, (b, hkv, length, d)
        monkeypatch.setattr(kd.device, "backend", lambda: "cuda")
        monkeypatch.setattr(kd.device, "hopper", lambda: True)
        kd._mma_fits.cache_clear()
        try:
            assert kd.mma_takes(q, kc, kc, length) == want
        finally:
            kd._mma_fits.cache_clear()


@pytest.mark.parametrize("floor", [0, 256])
@pytest.mark.parametrize("b,length,d", [(1, 4096, 128), (1, 8192, 128), (1, 16384, 128), (8, 4096, 128),
                                        (1, 1000, 128), (4, 8192, 64)])
def test_split_ks_splits_are_the_librarys_with_and_without_the_block_floor(b, length, d, floor, monkeypatch):
    from ksearch.kernels.decode import cuda_split_k as CS

    params = {**FAM.default(), "group_heads": True, "target_blocks": 1056, "min_chunk": 512, "unroll": 4,
              "ring": 2, "floor_blocks": floor}
    cand = _candidate(params, monkeypatch)
    grids = []
    for name in ("_ring", "_split"):
        monkeypatch.setitem(cand, name, lambda **kw: grids.append(kw["grid"]) or [mx.zeros((1,))] * 2)
    monkeypatch.setitem(cand, "_merge", lambda **kw: [mx.zeros((1,))])
    q = mx.zeros((b, 32, 1, d), dtype=mx.float16)
    kc = mx.zeros((b, 8, length + 16, d), dtype=mx.float16)
    cand["run"](q, kc, kc, length)
    cfg = CS.DecodeConfig(ring=2, floor_blocks=floor)
    assert grids == [(b * 8 * 128, CS.plan(b * 8, length, d, cfg)[0], 1)]


def test_with_constants_each_kernel_is_made_once_a_dtype_with_its_arguments_in_its_header(monkeypatch):
    """`constants`: the kernels' template arguments written into their headers in MLX's namespace, one kernel object
    per (dtype, D, G), called without template= (MLX formats template arguments into every call), at the library's
    split counts."""
    from ksearch.kernels.decode import cuda_split_k as CS

    made, calls = record_kernels(monkeypatch)
    params = {**FAM.default(), "group_heads": True, "target_blocks": 1056, "min_chunk": 512, "unroll": 4,
              "prefetch": True, "ring": 2, "floor_blocks": 256, "constants": True}
    namespace: dict = {}
    exec(compile(FAM.source(params), "candidate", "exec"), namespace)  # noqa: S102 - our own rendering
    assert made == []  # nothing made before the first call
    q = mx.zeros((1, 32, 1, 128), dtype=mx.float16)
    kc = mx.zeros((1, 8, 4352, 128), dtype=mx.float16)
    for _ in range(3):
        namespace["run"](q, kc, kc, 4096)
    assert len(made) == 2 and len(calls) == 6 and all("template" not in kw for _, kw in calls)
    split, merge = made
    assert split["header"].endswith("namespace mlx::core::cu {\nusing T = __half;\nconstexpr int D = 128;\n"
                                    "constexpr int G = 4;\nconstexpr int NW = 4;\nconstexpr int U = 4;\n"
                                    "constexpr bool PREFETCH = true;\nconstexpr int RING = 2;\n}  // namespace mlx::core::cu\n")
    assert merge["header"] == constant_lines((("T", mx.float16), ("D", 128), ("G", 4)))  # as the library writes it
    assert split["name"] != merge["name"] and split["source"] == dec_t.cuda_split_k_text.SPLIT_RING_SOURCE
    want = CS.plan(8, 4096, 128, CS.DecodeConfig(ring=2))[0]
    assert calls[0][1]["grid"] == (8 * 128, want, 1)
    namespace["run"](q.astype(mx.bfloat16), kc.astype(mx.bfloat16), kc.astype(mx.bfloat16), 4096)
    assert len(made) == 4 and "using T = __nv_bfloat16;" in made[2]["header"]
    assert len({k["name"] for k in made}) == 4  # a name of its own per set (MLX before 0.32.1 keyed by name)


def test_with_constants_the_tensor_core_kernels_carry_the_librarys_arguments(monkeypatch):
    made, calls = record_kernels(monkeypatch)
    namespace: dict = {}
    exec(compile(FAM.source({**FAM.default(), "mma": 64, "constants": True}), "candidate", "exec"), namespace)  # noqa: S102
    namespace["_HOPPER"] = True
    q = mx.zeros((8, 32, 1, 128), dtype=mx.float16)
    kc = mx.zeros((8, 8, 16640, 128), dtype=mx.float16)
    namespace["run"](q, kc, kc, 16384)
    one, parts, merge, few = made
    cfg = kd.MMA_DEFAULT
    for kern, cs in ((one, 1), (parts, 0)):
        # the library's own constants for this kernel, as it writes them (kernel_text.constant_lines)
        assert kern["header"].endswith(constant_lines(DC.template(mx.float16, 128, 4, cfg, cs)))
        assert kern["shared_memory"] == cfg.smem_bytes(128, 4)
    assert [c[0] for c in calls] == [parts["name"], few["name"]]  # 2 splits a pair at B 8, 16k
    assert few["source"] == cuda_split_k_text.MERGE_FEW_SOURCE and f"constexpr int NF = {MERGE_FEW};" in few["header"]
    assert merge["source"] == cuda_split_k_text.MERGE_SOURCE and "NF" not in merge["header"]
    assert all("template" not in kw for _, kw in calls)


def test_the_split_k_pattern_realises_constants():
    import random

    assert FAM.default()["constants"] is False
    assert FAM.realise("split_k_decode_lse_merge", FAM.default(), random.Random(0))["constants"] is True


def test_with_constants_the_fused_kernel_is_made_once_and_zero_filled_each_call(monkeypatch):
    made, calls = record_kernels(monkeypatch)
    namespace: dict = {}
    exec(compile(FAM.source({**FAM.default(), "fused": True, "constants": True}), "candidate", "exec"), namespace)  # noqa: S102
    q = mx.zeros((2, 32, 1, 64), dtype=mx.float16)
    kc = mx.zeros((2, 8, 1100, 64), dtype=mx.float16)
    namespace["run"](q, kc, kc, 1000)
    namespace["run"](q, kc, kc, 1000)
    assert len(made) == 1 and made[0]["source"] == dec_t.cuda_split_k_text.FUSED_SOURCE
    assert "constexpr int D = 64;" in made[0]["header"]
    assert [kw["init_value"] for _, kw in calls] == [0, 0] and all("template" not in kw for _, kw in calls)


@pytest.mark.slow
@pytest.mark.parametrize("dtype,mma", [("float16", False), ("bfloat16", True)])
def test_with_constants_the_kernels_compile_as_mlx_builds_them(dtype, mma, monkeypatch):
    """Each kernel the constants rendering makes, with the header it builds at run time and no template arguments,
    wrapped as MLX wraps a custom kernel and compiled for sm_90a (one translation unit each: the constants of two
    kernels in MLX's namespace would clash)."""
    from ksearch.backends.nvcc import compile_check, nvcc_path, wrap

    if nvcc_path() is None:
        pytest.skip("nvcc not installed")
    made, _calls = record_kernels(monkeypatch)
    params = {**FAM.default(), "group_heads": True, "ring": 2, "unroll": 4, "prefetch": True, "constants": True,
              "mma": 64 if mma else 0}
    namespace: dict = {}
    exec(compile(FAM.source(params), "candidate", "exec"), namespace)  # noqa: S102 - our own rendering
    namespace["_HOPPER"] = mma
    dt = getattr(mx, dtype)
    b, length = (8, 16384) if mma else (1, 4096)
    q = mx.zeros((b, 32, 1, 128), dtype=dt)
    kc = mx.zeros((b, 8, length + 256, 128), dtype=dt)
    namespace["run"](q, kc, kc, length)
    assert len(made) == (4 if mma else 2)  # with mma: the one-launch and parts kernels and the two merges
    for kern in made:
        outs = [(n, "float32" if n.startswith("part") else "T") for n in kern["output_names"]]
        unit = wrap(str(kern["name"]), str(kern["source"]), str(kern["header"]),
                    [(n, "T" if n in ("q", "k", "v") else "float32") for n in kern["input_names"]], outs, dtype=dtype)
        ok, log = compile_check([unit])
        assert ok, log[-3000:]
