"""The CPU engine of the Metal emulation against numpy: threadgroup reductions with barriers, every SIMD-group
function (with inactive lanes), vectors and swizzles, half and bfloat rounding, atomics, simdgroup_matrix products,
the smaller last threadgroup of a dispatch, templates, math. The kernels of each group share one source, so that
each costs one compile (cached on disk afterwards)."""

from __future__ import annotations

import numpy as np
import pytest
from metalemu_source import mlx_buffers, mlx_source

from ksearch.knowledge.metal_check import clang_path

pytestmark = pytest.mark.skipif(clang_path() is None, reason="the Metal emulation needs clang++")


def run(src: str, name: str, bufs: list[np.ndarray], grid: tuple[int, int, int], tg: tuple[int, int, int]) -> None:
    from ksearch.metalemu.cpu import run_kernel

    run_kernel(src, name, bufs, grid, tg)


# ---------------------------------------------------------------------------------------------------------------------
# Threadgroup memory, barriers, SIMD-group functions

REDUCE = """
    uint tid = thread_position_in_threadgroup.x, row = threadgroup_position_in_grid.x;
    int cols = x_shape[1];
    threadgroup float buf[TPB];
    float s = 0.0f;
    for (int c = tid; c < cols; c += TPB) s += x[row * cols + c];
    buf[tid] = s;
    threadgroup_barrier(mem_flags::mem_threadgroup);
    for (uint o = TPB / 2; o > 0; o >>= 1) {
        if (tid < o) buf[tid] += buf[tid + o];
        threadgroup_barrier(mem_flags::mem_threadgroup);
    }
    if (tid == 0) out[row] = buf[0];
"""

SIMD = """
    uint gid = thread_position_in_grid.x, lane = thread_index_in_simdgroup;
    float v = x[gid];
    int iv = ix[gid];
    device float* o = out + gid * 16;
    o[0] = simd_sum(v);
    o[1] = simd_max(v);
    o[2] = simd_min(v);
    o[3] = simd_prefix_inclusive_sum(v);
    o[4] = simd_prefix_exclusive_sum(v);
    o[5] = simd_shuffle(v, (lane * 7) % 32);
    o[6] = simd_shuffle_xor(v, 5);
    o[7] = simd_shuffle_up(v, 3);
    o[8] = simd_shuffle_down(v, 3);
    o[9] = simd_broadcast(v, 9);
    o[10] = simd_product(v);
    o[11] = simd_all(v > -100.0f) ? 1.0f : 0.0f;
    o[12] = simd_any(v > 2.5f) ? 1.0f : 0.0f;
    o[13] = quad_sum(v);
    o[14] = quad_shuffle(v, 3 - (lane % 4));
    o[15] = simd_broadcast_first(v);
    device int* io = iout + gid * 4;
    io[0] = simd_and(iv);
    io[1] = simd_or(iv);
    io[2] = simd_xor(iv);
    io[3] = int(ulong(simd_ballot(v > 0.0f)) & 0x7fffffffu);
"""

# Lanes 0..9 of each simdgroup return at once: the SIMD-group functions see only the others as active lanes.
DIVERGE = """
    uint gid = thread_position_in_grid.x, lane = thread_index_in_simdgroup;
    float v = x[gid];
    if (lane < 10) { out[gid * 3] = -1.0f; out[gid * 3 + 1] = -1.0f; out[gid * 3 + 2] = -1.0f; return; }
    out[gid * 3] = simd_sum(v);
    out[gid * 3 + 1] = simd_prefix_exclusive_sum(v);
    out[gid * 3 + 2] = simd_shuffle(v, lane - 10);  // lanes 20..31 read returned lanes: undefined (NaN here)
"""


# Threadgroup variables of sibling blocks have their own storage (sm_s must not overwrite sm_m while the second
# simdgroup still reads it); half elements of threadgroup memory convert to float.
SCOPES = """
    uint t = thread_position_in_threadgroup.x, sg = simdgroup_index_in_threadgroup, l = thread_index_in_simdgroup;
    float v = x[t];
    float m, s;
    {
        threadgroup float sm_m[32];
        float mv = simd_max(v);
        if (l == 0) sm_m[sg] = mv;
        threadgroup_barrier(mem_flags::mem_threadgroup);
        m = simd_max(l < 2 ? sm_m[l] : -INFINITY);
    }
    {
        threadgroup float sm_s[32];
        float sv = simd_sum(v);
        if (l == 0) sm_s[sg] = sv;
        threadgroup_barrier(mem_flags::mem_threadgroup);
        s = simd_sum(l < 2 ? sm_s[l] : 0.0f);
    }
    threadgroup half hbuf[64];
    hbuf[t] = half(v);
    threadgroup_barrier(mem_flags::mem_threadgroup);
    float h = float(hbuf[63 - t]) + hbuf[t] * 2.0f;
    out[t * 3] = m;
    out[t * 3 + 1] = s;
    out[t * 3 + 2] = h;
"""


@pytest.fixture(scope="module")
def sync_source() -> dict[str, str]:
    x = np.zeros((4, 300), np.float32)
    parts = {}
    s1, n1 = mlx_source("reduce", {"x": x}, {"out": "float32"}, REDUCE, template=[("TPB", 64)])
    s2, n2 = mlx_source("simd", {"x": np.zeros(96, np.float32), "ix": np.zeros(96, np.int32)},
                        {"out": "float32", "iout": "int32"}, SIMD)
    s3, n3 = mlx_source("diverge", {"x": np.zeros(64, np.float32)}, {"out": "float32"}, DIVERGE)
    s4, n4 = mlx_source("scopes", {"x": np.zeros(64, np.float32)}, {"out": "float32"}, SCOPES)
    parts = {"reduce": n1, "simd": n2, "diverge": n3, "scopes": n4}
    return {"source": s1 + s2 + s3 + s4, **parts}


def test_threadgroup_reduction_with_barriers(sync_source: dict[str, str]) -> None:
    rng = np.random.default_rng(0)
    x = rng.standard_normal((4, 300)).astype(np.float32)
    out = np.zeros(4, np.float32)
    run(sync_source["source"], sync_source["reduce"], mlx_buffers({"x": x}, {"out": out}, REDUCE), (4 * 64, 1, 1),
        (64, 1, 1))
    np.testing.assert_allclose(out, x.sum(1), rtol=1e-5, atol=1e-4)


def test_every_simd_function(sync_source: dict[str, str]) -> None:
    rng = np.random.default_rng(1)
    x = rng.uniform(-3, 3, 96).astype(np.float32)
    ix = rng.integers(0, 1 << 20, 96).astype(np.int32)
    out = np.zeros(96 * 16, np.float32)
    iout = np.zeros(96 * 4, np.int32)
    run(sync_source["source"], sync_source["simd"], [x, ix, out, iout], (96, 1, 1), (96, 1, 1))
    out = out.reshape(96, 16)
    iout = iout.reshape(96, 4)
    for g in range(3):
        v = x[g * 32:(g + 1) * 32]
        iv = ix[g * 32:(g + 1) * 32]
        o = out[g * 32:(g + 1) * 32]
        lanes = np.arange(32)
        np.testing.assert_allclose(o[:, 0], v.sum(), rtol=1e-5)
        assert (o[:, 1] == v.max()).all() and (o[:, 2] == v.min()).all()
        np.testing.assert_allclose(o[:, 3], np.cumsum(v), rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(o[:, 4], np.concatenate([[0], np.cumsum(v)[:-1]]), rtol=1e-5, atol=1e-5)
        assert (o[:, 5] == v[(lanes * 7) % 32]).all()
        assert (o[:, 6] == v[lanes ^ 5]).all()
        assert (o[:, 7] == np.where(lanes >= 3, v[np.maximum(lanes - 3, 0)], v)).all()
        assert (o[:, 8] == np.where(lanes + 3 < 32, v[np.minimum(lanes + 3, 31)], v)).all()
        assert (o[:, 9] == v[9]).all()
        np.testing.assert_allclose(o[:, 10], np.prod(v.astype(np.float64)), rtol=1e-4)
        assert (o[:, 11] == 1).all() and (o[:, 12] == float((v > 2.5).any())).all()
        np.testing.assert_allclose(o[:, 13], np.repeat(v.reshape(8, 4).sum(1), 4), rtol=1e-5)
        assert (o[:, 14] == v[(lanes // 4) * 4 + 3 - lanes % 4]).all()
        assert (o[:, 15] == v[0]).all()
        io = iout[g * 32:(g + 1) * 32]
        assert (io[:, 0] == np.bitwise_and.reduce(iv)).all()
        assert (io[:, 1] == np.bitwise_or.reduce(iv)).all()
        assert (io[:, 2] == np.bitwise_xor.reduce(iv)).all()
        ballot = sum(1 << int(i) for i in range(32) if v[i] > 0) & 0x7FFFFFFF
        assert (io[:, 3] == ballot).all()


def test_inactive_lanes(sync_source: dict[str, str]) -> None:
    x = np.arange(64, dtype=np.float32)
    out = np.zeros(64 * 3, np.float32)
    run(sync_source["source"], sync_source["diverge"], [x, out], (64, 1, 1), (64, 1, 1))
    out = out.reshape(64, 3)
    for g in range(2):
        v = x[g * 32:(g + 1) * 32]
        o = out[g * 32:(g + 1) * 32]
        assert (o[:10] == -1).all()
        assert (o[10:, 0] == v[10:].sum()).all()
        assert (o[10:, 1] == np.concatenate([[0], np.cumsum(v[10:])[:-1]])).all()
        assert (o[20:, 2] == v[10:22]).all()
        assert np.isnan(o[10:20, 2]).all()


def test_threadgroup_variables_of_sibling_blocks(sync_source: dict[str, str]) -> None:
    x = np.linspace(-3, 3, 64).astype(np.float32)
    out = np.zeros(64 * 3, np.float32)
    run(sync_source["source"], sync_source["scopes"], [x, out], (64, 1, 1), (64, 1, 1))
    o = out.reshape(64, 3)
    assert (o[:, 0] == x.max()).all()
    np.testing.assert_allclose(o[:, 1], x.sum(), atol=1e-5)
    h = x.astype(np.float16)
    np.testing.assert_allclose(o[:, 2], h[::-1].astype(np.float32) + h.astype(np.float32) * 2, rtol=1e-6)


# ---------------------------------------------------------------------------------------------------------------------
# Types: vectors, swizzles, half, bfloat; math

VECTORS = """
    uint i = thread_position_in_grid.x;
    const device half4* h4 = (const device half4*)hx;
    half4 a = h4[i];
    float4 f = float4(a);
    half4 b = a * 2.0h + half4(1.0h);
    half2 sw = a.wz;
    float4 g = float4(float2(sw), f.xy) + f.wzyx;
    int4 n = int4(f * 10.0f);
    float4 back = static_cast<float4>(n);
    uint bits = as_type<uint>(f.x);
    device float4* o = (device float4*)out;
    o[i * 4] = float4(b);
    o[i * 4 + 1] = g;
    o[i * 4 + 2] = back;
    o[i * 4 + 3] = float4(as_type<float>(bits), dot(f, f), length(f.xy), select(0.0f, 1.0f, f.x > f.y));
    bfloat bv = as_type<bfloat>(bx[i]);
    float bf = float(bv * bfloat(3.0f));
    half hv = a.x;
    float mixed = (i % 2 == 0) ? hv : 0.5f;
    ob[i * 2] = bf;
    ob[i * 2 + 1] = mixed;
"""

MATH = """
    uint i = thread_position_in_grid.x;
    float v = x[i];
    half h = half(v);
    device float* o = out + i * 12;
    o[0] = metal::exp(v);
    o[1] = fast::exp2(v);
    o[2] = metal::log(metal::abs(v) + 1.0f);
    o[3] = metal::precise::sqrt(metal::abs(v));
    o[4] = rsqrt(metal::abs(v) + 1.0f);
    o[5] = metal::tanh(v);
    o[6] = fma(v, 2.0f, 1.0f);
    o[7] = clamp(v, -0.5f, 0.5f);
    o[8] = mix(0.0f, 10.0f, metal::abs(v));
    o[9] = float(metal::exp(h));
    o[10] = float(max(h, half(0.25f)));
    o[11] = metal::max(int(v * 3.0f), 1);
"""


@pytest.fixture(scope="module")
def type_source() -> dict[str, str]:
    s1, n1 = mlx_source("vectors", {"hx": np.zeros(32, np.float16), "bx": np.zeros(8, np.uint16)},
                        {"out": "float32", "ob": "float32"}, VECTORS)
    s2, n2 = mlx_source("math", {"x": np.zeros(16, np.float32)}, {"out": "float32"}, MATH)
    return {"source": s1 + s2, "vectors": n1, "math": n2}


def test_vectors_half_bfloat(type_source: dict[str, str]) -> None:
    rng = np.random.default_rng(2)
    hx = rng.uniform(-4, 4, 32).astype(np.float16)
    bf = rng.uniform(-4, 4, 8).astype(np.float32)
    bx = (bf.view(np.uint32) >> 16).astype(np.uint16)  # bfloat16 by truncation (exactly representable below)
    out = np.zeros(8 * 16, np.float32)
    ob = np.zeros(16, np.float32)
    run(type_source["source"], type_source["vectors"], [hx, bx, out, ob], (8, 1, 1), (8, 1, 1))
    out = out.reshape(8, 4, 4)
    a = hx.reshape(8, 4)
    f = a.astype(np.float32)
    b = (a * np.float16(2)) + np.float16(1)  # numpy rounds each float16 operation, as Metal does
    np.testing.assert_array_equal(out[:, 0], b.astype(np.float32))
    g = np.concatenate([f[:, [3, 2]], f[:, :2]], 1) + f[:, ::-1]
    np.testing.assert_allclose(out[:, 1], g, rtol=1e-6)
    np.testing.assert_array_equal(out[:, 2], np.trunc(f * 10).astype(np.int32).astype(np.float32))
    np.testing.assert_array_equal(out[:, 3, 0], f[:, 0])
    np.testing.assert_allclose(out[:, 3, 1], (f * f).sum(1), rtol=1e-5)
    np.testing.assert_allclose(out[:, 3, 2], np.hypot(f[:, 0], f[:, 1]), rtol=1e-5)
    np.testing.assert_array_equal(out[:, 3, 3], (f[:, 0] > f[:, 1]).astype(np.float32))
    bval = (bx.astype(np.uint32) << 16).view(np.float32)
    prod = bval * np.float32(3)
    rounded = ((prod.view(np.uint32) + 0x7FFF + ((prod.view(np.uint32) >> 16) & 1)) >> 16 << 16).view(np.float32)
    np.testing.assert_array_equal(ob[0::2], rounded)
    np.testing.assert_array_equal(ob[1::2], np.where(np.arange(8) % 2 == 0, f[:, 0], 0.5))


def test_math_functions(type_source: dict[str, str]) -> None:
    x = np.linspace(-2, 2, 16).astype(np.float32)
    out = np.zeros(16 * 12, np.float32)
    run(type_source["source"], type_source["math"], [x, out], (16, 1, 1), (16, 1, 1))
    o = out.reshape(16, 12)
    ax = np.abs(x)
    expect = [np.exp(x), np.exp2(x), np.log(ax + 1), np.sqrt(ax), 1 / np.sqrt(ax + 1), np.tanh(x), x * 2 + 1,
              np.clip(x, -0.5, 0.5), 10 * ax]
    for k, e in enumerate(expect):
        np.testing.assert_allclose(o[:, k], e, rtol=2e-6, atol=1e-6, err_msg=f"column {k}")
    h = x.astype(np.float16)
    np.testing.assert_array_equal(o[:, 9], np.exp(h.astype(np.float32)).astype(np.float16).astype(np.float32))
    np.testing.assert_array_equal(o[:, 10], np.maximum(h, np.float16(0.25)).astype(np.float32))
    np.testing.assert_array_equal(o[:, 11], np.maximum(np.trunc(x * 3).astype(np.int32), 1))


# ---------------------------------------------------------------------------------------------------------------------
# Atomics, simdgroup_matrix, partial threadgroups, templates

ATOMIC_HIST = """
    uint i = thread_position_in_grid.x;
    atomic_fetch_add_explicit(&hist[x[i] % 16], 1, memory_order_relaxed);
"""
ATOMIC_SUM = """
    uint i = thread_position_in_grid.x, t = thread_index_in_threadgroup;
    threadgroup atomic_int count;
    if (t == 0) atomic_store_explicit(&count, 0, memory_order_relaxed);
    threadgroup_barrier(mem_flags::mem_threadgroup);
    if (v[i] > 0.0f) atomic_fetch_add_explicit(&count, 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&total[0], v[i], memory_order_relaxed);
    threadgroup_barrier(mem_flags::mem_threadgroup);
    if (t == 0) atomic_fetch_add_explicit(&total[1], float(atomic_load_explicit(&count, memory_order_relaxed)),
                                          memory_order_relaxed);
"""
MATMUL = """
    // C (M x N) = A (M x K) @ B (K x N), one simdgroup per 8x8 tile of C.
    uint tile = simdgroup_index_in_threadgroup + 4 * threadgroup_position_in_grid.x;
    int N = b_shape[1], K = a_shape[1];
    int tr = (tile / (N / 8)) * 8, tc = (tile % (N / 8)) * 8;
    simdgroup_float8x8 acc = make_filled_simdgroup_matrix<float, 8, 8>(0.0f);
    for (int k = 0; k < K; k += 8) {
        simdgroup_matrix<T, 8, 8> ma, mb;
        simdgroup_load(ma, a + tr * K + k, K);
        simdgroup_load(mb, b + k * N + tc, N);
        simdgroup_multiply_accumulate(acc, ma, mb, acc);
    }
    simdgroup_store(acc, c + tr * N + tc, N);
    simdgroup_float8x8 tb;
    simdgroup_load(tb, b + tc, N, ulong2(0, 0), true);   // B's first 8 rows, transposed
    simdgroup_store(tb, bt + tile * 64, 8);
"""
PARTIAL = """
    uint i = thread_position_in_grid.x;
    out[i] = x[i] * 2.0f;          // no bounds check: the last threadgroup has only the threads the grid has
    tg[i] = threads_per_threadgroup.x * 1000 + thread_position_in_threadgroup.x;
"""
TEMPLATED = """
    uint i = thread_position_in_grid.x;
    T acc = T(0);
    for (int k = 0; k < N; ++k) acc += x[i * N + k];
    out[i] = SQUARE ? acc * acc : acc;
"""


@pytest.fixture(scope="module")
def misc_source() -> dict[str, str]:
    s1, n1 = mlx_source("hist", {"x": np.zeros(100, np.uint32)}, {"hist": "int32"}, ATOMIC_HIST, atomic=True)
    s2, n2 = mlx_source("asum", {"v": np.zeros(100, np.float32)}, {"total": "float32"}, ATOMIC_SUM, atomic=True)
    s3, n3 = mlx_source("mm", {"a": np.zeros((16, 24), np.float16), "b": np.zeros((24, 32), np.float16)},
                        {"c": "float32", "bt": "float32"}, MATMUL, template=[("T", "float16")])
    s4, n4 = mlx_source("partial", {"x": np.zeros(1000, np.float32)}, {"out": "float32", "tg": "uint32"}, PARTIAL)
    s5, n5 = mlx_source("templ", {"x": np.zeros(40, np.float16)}, {"out": "float16"}, TEMPLATED,
                        template=[("T", "float16"), ("N", 4), ("SQUARE", True)])
    return {"source": s1 + s2 + s3 + s4 + s5, "hist": n1, "asum": n2, "mm": n3, "partial": n4, "templ": n5}


def test_atomics(misc_source: dict[str, str]) -> None:
    x = np.random.default_rng(3).integers(0, 1000, 100).astype(np.uint32)
    hist = np.zeros(16, np.int32)
    run(misc_source["source"], misc_source["hist"], [x, hist], (100, 1, 1), (32, 1, 1))
    np.testing.assert_array_equal(hist, np.bincount(x % 16, minlength=16))
    v = np.random.default_rng(4).standard_normal(100).astype(np.float32)
    total = np.zeros(2, np.float32)
    run(misc_source["source"], misc_source["asum"], [v, total], (100, 1, 1), (32, 1, 1))
    np.testing.assert_allclose(total[0], v.sum(), rtol=1e-4, atol=1e-4)
    assert total[1] == (v > 0).sum()


def test_simdgroup_matrix_product(misc_source: dict[str, str]) -> None:
    rng = np.random.default_rng(5)
    a = rng.standard_normal((16, 24)).astype(np.float16)
    b = rng.standard_normal((24, 32)).astype(np.float16)
    c = np.zeros((16, 32), np.float32)
    bt = np.zeros(8 * 64, np.float32)
    shapes = [np.array(a.shape, np.int32), np.array(b.shape, np.int32)]
    run(misc_source["source"], misc_source["mm"], [a, shapes[0], b, shapes[1], c, bt], (2 * 128, 1, 1), (128, 1, 1))
    np.testing.assert_allclose(c, a.astype(np.float32) @ b.astype(np.float32), rtol=1e-5, atol=1e-4)
    tiles = bt.reshape(8, 8, 8)
    for tile in range(8):
        tc = (tile % 4) * 8
        np.testing.assert_array_equal(tiles[tile], b[:8, tc:tc + 8].astype(np.float32).T)


def test_partial_last_threadgroup(misc_source: dict[str, str]) -> None:
    x = np.arange(1000, dtype=np.float32)
    out = np.zeros(1000, np.float32)
    tg = np.zeros(1000, np.uint32)
    run(misc_source["source"], misc_source["partial"], [x, out, tg], (1000, 1, 1), (256, 1, 1))
    np.testing.assert_array_equal(out, x * 2)
    expect = np.where(np.arange(1000) < 768, 256, 232) * 1000 + np.arange(1000) % 256
    np.testing.assert_array_equal(tg, expect)


def test_template_arguments(misc_source: dict[str, str]) -> None:
    x = np.linspace(-1, 1, 40).astype(np.float16)
    out = np.zeros(10, np.float16)
    run(misc_source["source"], misc_source["templ"], [x, out], (10, 1, 1), (10, 1, 1))
    acc = np.zeros(10, np.float16)
    for k in range(4):
        acc = acc + x.reshape(10, 4)[:, k]
    np.testing.assert_array_equal(out, acc * acc)
