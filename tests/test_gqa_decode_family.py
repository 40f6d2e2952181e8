"""The gqa_decode CUDA family's tensor-core choice (`mma`): the candidate carries the library's kernel texts, launch
arithmetic and dispatch rule, so that a search can reach what `decode()` runs on Hopper."""

import contextlib
import importlib

import mlx.core as mx
import pytest

from ksearch.kernels.decode import cuda_cluster as DC
from ksearch.kernels.kernel_text import compact

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
    source = FAM.source({**FAM.default(), "mma": 256})
    assert f"shared_memory={cfg.smem_bytes(128, 4)}" in source
    for cs in (0, 1):  # the library's template arguments, in its order
        want = ", ".join(f'("{k}", {v})' for k, v in DC.template("T", 128, 4, cfg, cs)[1:])
        assert want in source, want
    assert cand["_HOPPER"] is False  # this machine: the split-K path, which runs everywhere


@pytest.mark.parametrize("b,length", [(8, 16384), (16, 4096), (16, 32768), (9, 20000), (64, 3000)])
def test_its_splits_are_the_librarys(b, length, monkeypatch):
    """The candidate's `_mma` launches what the library's dispatch launches: one split a pair (the output written by
    the block) or the same split count and merge."""
    cand = _candidate({**FAM.default(), "mma": 256}, monkeypatch)
    calls = []
    for name in ("_mma_one", "_mma_parts", "_mma_merge"):
        monkeypatch.setitem(cand, name, lambda name=name, **kw: calls.append((name, kw)) or [mx.zeros((1,))] * 2)
    q = mx.zeros((b, 32, 1, 128), dtype=mx.float16)
    kc = mx.zeros((b, 8, length, 128), dtype=mx.float16)
    cand["_mma"](q, kc, kc, length)
    ns = DC.wave_splits(b * 8, length, 128, 4, kd.MMA_DEFAULT)
    if ns == 1:
        assert [c[0] for c in calls] == ["_mma_one"] and calls[0][1]["grid"] == (b * 8 * 128, 1, 1)
    else:
        assert [c[0] for c in calls] == ["_mma_parts", "_mma_merge"] and calls[0][1]["grid"] == (b * 8 * 128, ns, 1)


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
