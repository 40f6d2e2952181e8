"""Every Metal kernel of ksearch.kernels, run (on the Metal emulation's CPU engine) and held against MLX's own ops.

The library runs unchanged: the emulation is put in place of `mx.fast.metal_kernel` and the public dispatch
(`attention`, `decode`, the selective-scan functions) is called with the Metal kernels opted in, as on a Mac. Shapes
are small and deliberately not multiples of the kernels' tiles.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from functools import partial
from pathlib import Path

import mlx.core as mx
import numpy as np
import pytest

from ksearch.backends.detect import clang_path
from ksearch.metalemu import surface

pytestmark = pytest.mark.skipif(clang_path() is None, reason="clang++ not installed: the Metal emulation needs it")


def _kernel_caches() -> list[object]:
    from ksearch.kernels.attention import metal_fragments, metal_rows, metal_simdgroup
    from ksearch.kernels.decode import metal_split_k
    from ksearch.kernels.selective_scan import metal

    return [metal_rows._prefill_kernel, metal_simdgroup._kernel, metal_fragments._kernel, metal_split_k._decode_kernels,
            metal.scan_kernel, metal.conv_kernel, metal.step_kernel]


@pytest.fixture(scope="module", autouse=True)
def emulated() -> Iterator[None]:
    """The emulation in place for this module; kernel objects built before (MLX's own) are dropped."""
    mx.set_default_device(mx.cpu)
    restore = surface.install("cpu")
    for c in _kernel_caches():
        c.cache_clear()  # type: ignore[attr-defined]
    try:
        yield
    finally:
        restore()
        for c in _kernel_caches():
            c.cache_clear()  # type: ignore[attr-defined]


def _rand(shape: tuple[int, ...], dtype: mx.Dtype, seed: int, scale: float = 1.0) -> mx.array:
    return (mx.random.normal(shape, key=mx.random.key(seed)) * scale).astype(dtype)


def _close(got: mx.array, want: mx.array, atol: float, rtol: float) -> None:
    g, w = np.array(got.astype(mx.float32)), np.array(want.astype(mx.float32))
    assert g.shape == w.shape
    assert np.isfinite(g).all()
    np.testing.assert_allclose(g, w, atol=atol, rtol=rtol)


# float32 on the matrix units is float32 throughout (no half-precision P): held to 2e-5, not float16's 2e-2
TOLERANCE = {mx.float16: 2e-2, mx.bfloat16: 5e-2, mx.float32: 2e-5}


def _sdpa(q: mx.array, k: mx.array, v: mx.array, causal: bool) -> mx.array:
    f = mx.float32
    return mx.fast.scaled_dot_product_attention(q.astype(f), k.astype(f), v.astype(f), scale=1 / math.sqrt(q.shape[-1]),
                                                mask="causal" if causal else None)


@pytest.mark.parametrize("dtype,d,causal,kernel", [
    (mx.float16, 64, True, "metal_simdgroup"),
    (mx.float16, 128, False, "metal_simdgroup"),
    (mx.float32, 64, True, "metal_simdgroup"),
    (mx.float32, 128, False, "metal_simdgroup"),
    (mx.bfloat16, 64, True, "metal_rows"),
    (mx.bfloat16, 128, False, "metal_rows"),
], ids=["simdgroup-d64-causal", "simdgroup-d128", "simdgroup-f32-d64-causal", "simdgroup-f32-d128",
        "rows-bf16-d64-causal", "rows-bf16-d128"])
def test_prefill_attention(dtype: mx.Dtype, d: int, causal: bool, kernel: str) -> None:
    from ksearch.kernels.attention import attention, prefill_plan

    # GQA (4 query heads on 2 KV heads), a query block and key blocks that do not divide the lengths.
    q, k, v = _rand((1, 4, 37, d), dtype, 1), _rand((1, 2, 45, d), dtype, 2), _rand((1, 2, 45, d), dtype, 3)
    assert prefill_plan(q, k, v, causal, use_metal=True)[0] == kernel
    out = attention(q, k, v, causal, use_metal=True)
    assert out.dtype == dtype and out.shape == q.shape
    tol = TOLERANCE[dtype]
    _close(out, _sdpa(q, k, v, causal), tol, tol)


@pytest.mark.parametrize("dtype,kernel,length", [(mx.float16, "metal_simdgroup", 101), (mx.float32, "metal_simdgroup", 69),
                                                  (mx.bfloat16, "metal_rows", 141)],
                         ids=["simdgroup", "simdgroup-f32", "rows"])
def test_causal_prefill_in_reverse_block_order_writes_every_row(dtype: mx.Dtype, kernel: str, length: int) -> None:
    # Causal query blocks run in reverse order (the last rows, which see the most keys, first): with several blocks
    # of a head (4 of 32 rows, 3 of 64) and two batches, each block must still write its own rows.
    from ksearch.kernels.attention import attention, prefill_plan

    q, k, v = (_rand((2, 4, length, 64), dtype, 7), _rand((2, 2, length + 6, 64), dtype, 8),
               _rand((2, 2, length + 6, 64), dtype, 9))
    assert prefill_plan(q, k, v, True, use_metal=True)[0] == kernel
    tol = TOLERANCE[dtype]
    _close(attention(q, k, v, True, use_metal=True), _sdpa(q, k, v, True), tol, tol)


def _kept_and_rescaled(q: mx.array, k: mx.array, bk: int, causal: bool) -> tuple[int, int]:
    """(blocks in which a simdgroup's 8 rows all keep their maximum, blocks in which one grows it past 2^8): the
    conditional rescale's rule, followed on the host over the kernel's key blocks."""
    d, length, s = q.shape[-1], q.shape[2], k.shape[2]
    qf = np.array(q.astype(mx.float32)) / math.sqrt(d) * math.log2(math.e)
    kf = np.repeat(np.array(k.astype(mx.float32)), q.shape[1] // k.shape[1], axis=1)
    sc = qf @ kf.transpose(0, 1, 3, 2)
    if causal:
        sc = np.where(np.arange(s)[None, :] <= np.arange(length)[:, None] + s - length, sc, -np.inf)
    kept = grew = 0
    for r0 in range(0, length - 7, 8):  # whole simdgroups of 8 rows
        m = np.full(sc.shape[:2] + (8,), -np.inf)
        for k0 in range(0, s, bk):
            blk = sc[:, :, r0:r0 + 8, k0:k0 + bk].max(axis=-1)
            keep = blk <= m + 8
            with np.errstate(invalid="ignore"):
                first = np.isneginf(m) & np.isfinite(blk)  # a row's first visible key: corr 0, not a growth
            grew += int((~keep & ~first).any(axis=-1).sum())
            kept += int(keep.all(axis=-1).sum())
            m = np.where(keep, m, np.maximum(m, blk))
    return kept, grew


@pytest.mark.parametrize("kernel", ["simdgroup", "fragments"])
@pytest.mark.parametrize("causal", [False, True])
def test_simdgroup_prefills_rescale_only_where_a_row_grew(kernel: str, causal: bool) -> None:
    """Rising scores (each row's maximum growing about 2 units of exp2 every 16 keys), at each kernel's own key blocks
    (16 keys at D=128 with the softmax in threadgroup memory, 32 with it in registers): blocks where a simdgroup's
    rows all keep their maximum and blocks where one grows it occur, and the kernel with the conditional rescale
    matches MLX's attention, as does the same kernel rescaling every block."""
    from ksearch.bench.attention import prefill_inputs
    from ksearch.kernels.attention import metal_fragments, metal_simdgroup

    run = metal_fragments.attention_metal_fragments if kernel == "fragments" else metal_simdgroup.attention_metal_mma
    keys = (metal_fragments if kernel == "fragments" else metal_simdgroup).block_keys(128)
    q, k, v = prefill_inputs((1, 4, 40, 128), (1, 2, 160, 128), mx.float16, "rising")
    kept, grew = _kept_and_rescaled(q, k, keys, causal)
    assert kept > 0 and grew > 0, (kept, grew)
    want = _sdpa(q, k, v, causal)
    for crescale in (True, False):
        _close(run(q, k, v, causal, crescale=crescale), want, 2e-2, 2e-2)


@pytest.mark.parametrize("d,causal,length,keys,bk,dtype", [
    (64, True, 37, 45, None, mx.float16), (128, False, 37, 45, None, mx.float16),
    (128, True, 101, 107, None, mx.float16), (64, False, 70, 70, 16, mx.float16), (128, True, 64, 64, 16, mx.float16),
    (128, True, 37, 45, None, mx.float32), (64, False, 70, 70, None, mx.float32),
], ids=["d64-causal-gqa", "d128", "d128-causal-s-past-l", "d64-bk16", "d128-causal-bk16", "f32-d128-causal",
        "f32-d64"])
def test_fragment_prefill_matches_mlx(d: int, causal: bool, length: int, keys: int, bk: int | None,
                                      dtype: mx.Dtype) -> None:
    """The softmax on each lane's own fragment elements (metal_fragments.py): GQA (4 query heads on 2), two batches,
    blocks and key blocks that do not divide the lengths, S > L with the mask, both rescale rules; float32 at its own
    blocks (16 keys at D=128: Q, K and V take the whole 32 KB)."""
    from ksearch.kernels.attention.metal_fragments import attention_metal_fragments

    q = _rand((2, 4, length, d), dtype, 11)
    k, v = _rand((2, 2, keys, d), dtype, 12), _rand((2, 2, keys, d), dtype, 13)
    want = _sdpa(q, k, v, causal)
    for crescale in (True, False):
        out = attention_metal_fragments(q, k, v, causal, crescale=crescale, bk=bk)
        assert out.dtype == dtype and out.shape == q.shape
        _close(out, want, TOLERANCE[dtype], TOLERANCE[dtype])


def test_fragment_prefill_with_another_lane_layout_fails(monkeypatch: pytest.MonkeyPatch) -> None:
    """The emulation holds the kernel to Apple's fragment layout: combining a row's lanes 2 apart instead of 8 apart
    (lanes that hold other rows) gives wrong rows; a block size that is no multiple of 8, or past the threadgroup
    memory, is refused in one line."""
    from ksearch.kernels.attention import metal_fragments as MF

    bad = MF.SOURCE.replace("ushort(8)", "ushort(2)")
    assert bad.count("ushort(2)") == 2
    monkeypatch.setattr(MF, "SOURCE", bad)
    MF._kernel.cache_clear()
    q, k, v = _rand((1, 2, 24, 64), mx.float16, 21), _rand((1, 2, 24, 64), mx.float16, 22), _rand((1, 2, 24, 64),
                                                                                                mx.float16, 23)
    with pytest.raises(AssertionError):
        _close(MF.attention_metal_fragments(q, k, v, True), _sdpa(q, k, v, True), 2e-2, 2e-2)
    MF._kernel.cache_clear()
    for bk in (12, 128):  # no multiple of 8; past 32 KB of threadgroup memory at D=64 (36 KB)
        with pytest.raises(ValueError, match="multiple of 8 whose Q, K and V fit 32 KB") as err:
            MF.attention_metal_fragments(q, k, v, True, bk=bk)
        assert "\n" not in str(err.value)


def test_bench_times_the_metal_kernels_named_beside_the_dispatch(monkeypatch: pytest.MonkeyPatch) -> None:
    """`ksearch bench attention --configs metal_fragments,metal_rows` on a Mac, the emulation standing in: each named
    kernel runs in the same rounds as the dispatch's and is checked against native; one that does not fit (the
    fragment kernel on bfloat16) is recorded as native, not credited."""
    from ksearch.bench.attention import bench_prefill_shape
    from ksearch.kernels import device

    monkeypatch.setattr(device, "backend", lambda: "metal")
    monkeypatch.setenv("KSEARCH_METAL_KERNELS", "1")
    shape = {"B": 1, "Hq": 4, "Hkv": 2, "D": 64, "L": 40, "S": 40, "dtype": "float16", "causal": True}
    row = bench_prefill_shape(shape, rounds=2, n=1, configs=["metal_fragments", "metal_rows"])
    assert row["kernel"] == "metal_simdgroup" and row["max_abs_diff_vs_native"] < 2e-2
    assert {n: c["kernel"] for n, c in row["configs"].items()} == {"metal_fragments": "metal_fragments",
                                                                  "metal_rows": "metal_rows"}
    assert all(c["max_abs_diff_vs_native"] < 2e-2 and c["latency_s"] > 0 for c in row["configs"].values())
    row_bf = bench_prefill_shape({**shape, "dtype": "bfloat16"}, rounds=2, n=1, configs=["metal_fragments"])
    assert row_bf["kernel"] == "metal_rows" and row_bf["configs"]["metal_fragments"]["kernel"] == "native"
    # `--dtypes float32 --configs metal_rows`: float32 on the matrix units beside the row kernel it replaced
    row32 = bench_prefill_shape({**shape, "dtype": "float32"}, rounds=2, n=1, configs=["metal_rows"])
    assert row32["kernel"] == "metal_simdgroup" and row32["configs"]["metal_rows"]["kernel"] == "metal_rows"
    assert row32["max_abs_diff_vs_native"] < 1e-4 and row32["configs"]["metal_rows"]["max_abs_diff_vs_native"] < 1e-4


def test_the_metal_prefill_setting_names_a_kernel_for_every_call(monkeypatch: pytest.MonkeyPatch) -> None:
    """KSEARCH_METAL_PREFILL=metal_fragments: a model's own `attention` calls take the fragment kernel where it fits
    (float16, float32) and MLX's attention where it does not (bfloat16); an unknown name is one line."""
    from ksearch.kernels import device
    from ksearch.kernels.attention import attention, prefill_plan

    monkeypatch.setattr(device, "backend", lambda: "metal")
    monkeypatch.setenv("KSEARCH_METAL_KERNELS", "1")
    monkeypatch.setenv("KSEARCH_METAL_PREFILL", "metal_fragments")
    q, k, v = _rand((1, 4, 40, 64), mx.float16, 31), _rand((1, 2, 40, 64), mx.float16, 32), _rand((1, 2, 40, 64),
                                                                                                mx.float16, 33)
    assert prefill_plan(q, k, v, True)[0] == "metal_fragments"
    _close(attention(q, k, v, True), _sdpa(q, k, v, True), 2e-2, 2e-2)
    assert prefill_plan(q.astype(mx.float32), k.astype(mx.float32), v.astype(mx.float32), True)[0] == "metal_fragments"
    assert prefill_plan(q.astype(mx.bfloat16), k.astype(mx.bfloat16), v.astype(mx.bfloat16), True)[0] == "native"
    monkeypatch.setenv("KSEARCH_METAL_PREFILL", "fragments")
    with pytest.raises(ValueError, match="KSEARCH_METAL_PREFILL='fragments': name one of metal_simdgroup") as err:
        prefill_plan(q, k, v, True)
    assert "\n" not in str(err.value)


def test_bench_times_the_metal_decode_with_its_knobs(monkeypatch: pytest.MonkeyPatch) -> None:
    """`ksearch bench decode --config unroll=2,warps=2` on a Mac, the emulation standing in: the Metal split-K kernel
    with those knobs, checked against native."""
    from ksearch.bench.attention import bench_decode_shape
    from ksearch.kernels import device
    from ksearch.kernels.decode.metal_split_k import MetalDecodeConfig

    monkeypatch.setattr(device, "backend", lambda: "metal")
    monkeypatch.setenv("KSEARCH_METAL_KERNELS", "1")
    shape = {"B": 1, "Hq": 4, "Hkv": 2, "D": 64, "length": 300, "capacity": 320, "dtype": "float16"}
    row = bench_decode_shape(shape, rounds=2, n=1, config=MetalDecodeConfig(warps=2, unroll=2), calls="independent")
    assert row["kernel"] == "metal_split_k" and "unroll=2" in row["config"] and row["max_abs_diff_vs_native"] < 2e-2


@pytest.mark.parametrize("dtype,d,length", [(mx.float16, 128, 300), (mx.float32, 64, 1000)])
def test_split_k_decode(dtype: mx.Dtype, d: int, length: int) -> None:
    from ksearch.kernels.decode import decode, decode_plan

    cap = length + 24  # positions past `length` hold data the kernel must ignore
    q, kc, vc = _rand((2, 8, 1, d), dtype, 4), _rand((2, 2, cap, d), dtype, 5), _rand((2, 2, cap, d), dtype, 6)
    assert decode_plan(q, kc, vc, length, use_metal=True)[0] == "metal_split_k"
    out = decode(q, kc, vc, length, use_metal=True)
    want = _sdpa(q, kc[:, :, :length], vc[:, :, :length], False)
    _close(out, want, 1e-2 if dtype == mx.float16 else 1e-4, 1e-2 if dtype == mx.float16 else 1e-4)


@pytest.mark.parametrize("warps,unroll,length,d", [(4, 4, 300, 128), (2, 2, 1000, 64), (8, 4, 77, 64)])
def test_split_k_decode_with_key_rows_in_flight(warps: int, unroll: int, length: int, d: int) -> None:
    """Each lane loading `unroll` key rows before using them (the CUDA kernel's unroll), partial last steps and
    splits included: the same result as with one row at a time."""
    from ksearch.kernels.decode.metal_split_k import decode_metal

    cap = length + 24
    q, kc, vc = _rand((2, 8, 1, d), mx.float16, 13), _rand((2, 2, cap, d), mx.float16, 14), \
        _rand((2, 2, cap, d), mx.float16, 15)
    want = _sdpa(q, kc[:, :, :length], vc[:, :, :length], False)
    for target_blocks in (1, 64):  # one split, and several
        out = decode_metal(q, kc, vc, length, warps=warps, target_blocks=target_blocks, unroll=unroll)
        _close(out, want, 1e-2, 1e-2)


def test_split_k_decode_merges_more_splits_than_a_tile() -> None:
    """The merge takes the splits' weights a tile of D splits at a time: more splits than D (two tiles, the second
    partial) give the same result."""
    from ksearch.kernels.decode.metal_split_k import decode_metal

    length, d = 9000, 64
    q, kc, vc = _rand((2, 8, 1, d), mx.float16, 16), _rand((2, 2, length, d), mx.float16, 17), \
        _rand((2, 2, length, d), mx.float16, 18)
    # 4 (batch, kv head) groups x 256 wanted splits: 128-key chunks, ceil(9000 / 128) = 71 splits > D = 64.
    out = decode_metal(q, kc, vc, length, warps=4, target_blocks=1024, unroll=1)
    _close(out, _sdpa(q, kc, vc, False), 1e-2, 1e-2)


@pytest.mark.parametrize("dtype,d,length", [(mx.float16, 64, 256), (mx.float32, 128, 512), (mx.float16, 64, 640)])
def test_split_k_decode_merges_a_few_splits_in_one_read(dtype: mx.Dtype, d: int, length: int) -> None:
    """2 to MERGE_FEW splits go to the one-read merge (a thread an output element), more to the tiled merge: both
    give MLX's result. 4 (batch, kv head) pairs of the 256 target blocks take 128-key chunks: length / 128 splits."""
    from ksearch.kernels.decode.metal_split_k import MERGE_FEW, decode_metal

    splits = math.ceil(length / 128)
    assert (splits <= MERGE_FEW) == (length < 640)  # 2 and 4 splits one way, 5 the other
    q, kc, vc = _rand((2, 8, 1, d), dtype, 19), _rand((2, 2, length + 8, d), dtype, 20), \
        _rand((2, 2, length + 8, d), dtype, 21)
    out = decode_metal(q, kc, vc, length, warps=4, target_blocks=256, unroll=1)
    tol = 1e-2 if dtype == mx.float16 else 1e-4
    _close(out, _sdpa(q, kc[:, :, :length], vc[:, :, :length], False), tol, tol)


@pytest.mark.parametrize("length,h0", [(50, False), (300, True)])
def test_selective_scan_on_strided_views(length: int, h0: bool) -> None:
    """The model's layout: u, delta, z, B, C are transposed slices of (batch, L, features) buffers, read in place
    (ensure_row_contiguous=False), y written as (batch, L, dim)."""
    from ksearch.kernels.selective_scan import ops, scan_views

    batch, dim, n = 2, 20, 16
    xz = _rand((batch, length, 3 * dim), mx.float32, 7, 0.5)
    bc = _rand((batch, length, 2 * n + 3), mx.float32, 8, 0.5)
    t = (0, 2, 1)
    u, delta, z = xz[..., :dim].transpose(t), xz[..., dim:2 * dim].transpose(t), xz[..., 2 * dim:].transpose(t)
    B, C = bc[..., 3:3 + n].transpose(t), bc[..., 3 + n:].transpose(t)
    A = -mx.exp(_rand((dim, n), mx.float32, 9, 0.5))
    D, bias = _rand((dim,), mx.float32, 10), _rand((dim,), mx.float32, 11, 0.1)
    state = _rand((batch, dim, n), mx.float32, 12) if h0 else None
    y, last = scan_views(u, delta, A, B, C, D, z, bias, h0=state, y_bld=True, backend="metal")
    y_ref, last_ref = ops.scan(u, delta, A, B, C, D, z, bias, h0=state, y_bld=True)
    _close(y, y_ref, 1e-4, 1e-3)
    _close(last, last_ref, 1e-4, 1e-3)


def test_causal_conv_and_decode_step() -> None:
    from ksearch.kernels.selective_scan import causal_conv_silu, ops, selective_state_update

    batch, length, dim, k, n, r = 2, 9, 40, 4, 16, 8
    x = _rand((batch, length, dim), mx.float16, 13)
    w, b = _rand((dim, k), mx.float16, 14, 0.5), _rand((dim,), mx.float16, 15, 0.1)
    state = _rand((batch, k - 1, dim), mx.float16, 16)
    for bias, st in ((b, state), (None, None)):
        got = causal_conv_silu(x, w, bias, st, backend="metal")
        want = ops.conv_silu(x, w, bias, st)
        for g, e in zip(got, want, strict=True):
            _close(g, e, 1e-2, 1e-2)
    f32 = mx.float32
    xs, zs = _rand((batch, dim), mx.float16, 17), _rand((batch, dim), mx.float16, 18)
    args = (xs, zs, state, w, b, _rand((r + 2 * n, dim), mx.float16, 19, 0.2), _rand((dim, r), mx.float16, 20, 0.3),
            _rand((dim,), f32, 21, 0.1), -mx.exp(_rand((dim, n), f32, 22, 0.5)), _rand((dim,), f32, 23),
            _rand((batch, dim, n), f32, 24))
    got = selective_state_update(*args, backend="metal")
    want = ops.mixer_step(*args)
    for g, e in zip(got, want, strict=True):
        _close(g, e, 2e-2, 2e-2)


def test_bench_prints_the_dispatch_and_each_named_kernel_group_by_group(monkeypatch: pytest.MonkeyPatch,
                                                                        tmp_path: Path) -> None:
    """`ksearch bench attention --configs metal_fragments` on a Mac, the emulation standing in, over two small shapes:
    a line a group (head dim, mask, length band) with the dispatch's geomean beside the named kernel's, and the
    same groups in the written summary."""
    import json

    from ksearch.bench import attention as ba
    from ksearch.kernels import device

    monkeypatch.setattr(device, "backend", lambda: "metal")
    monkeypatch.setenv("KSEARCH_METAL_KERNELS", "1")
    small = {"B": 1, "Hq": 4, "Hkv": 2, "D": 64, "L": 40, "S": 40}
    monkeypatch.setattr(ba, "prefill_shapes", lambda full, dtypes: [{**small, "dtype": t, "causal": c}
                                                                     for t in dtypes for c in (True, False)])
    monkeypatch.setattr(ba, "bench_prefill_shape",
                        partial(ba.bench_prefill_shape, rounds=2, n=1))
    lines: list[str] = []
    path = ba.run_bench("prefill", False, str(tmp_path), log=lines.append, configs=["metal_fragments"],
                        name="attention-prefill-configs", dtypes=["float16"])
    groups = json.loads(path.read_text())["summary"]["by_group"]
    assert list(groups) == ["D=64, no mask, L < 4096", "D=64, mask, L < 4096"]
    assert all(g["shapes"] == 1 and g["dispatch"] > 0 and g["metal_fragments"] > 0 for g in groups.values())
    printed = [line for line in lines if line.startswith("D=64")]
    assert len(printed) == 2 and all("dispatch" in line and "metal_fragments" in line for line in printed)
    # `--dtypes float32`: the same shapes in float32, written under a name that says so
    path32 = ba.run_bench("prefill", False, str(tmp_path), log=lines.append, configs=["metal_rows"],
                          name="attention-prefill-configs", dtypes=["float32"])
    assert path32.name.startswith("attention-prefill-configs-float32-")
    rows = json.loads(path32.read_text())["figures"]
    assert {r["kernel"] for r in rows} == {"metal_simdgroup"} and {r["dtype"] for r in rows} == {"float32"}
