"""The CUDA engine's translation, run on the CPU (tests/metalemu_cuda_host.py), against NumPy: every construct family,
simdgroup_matrix products, the smaller last threadgroup, and the library's Metal kernels through a stand-in for
mx.fast.metal_kernel. The text compiled here is the text the engine hands to NVRTC; only the CUDA builtins differ
(cuda_host.h: one OS thread per CUDA thread, real barriers)."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

from ksearch.metalemu.cuda_check import host_compiler

sys.path.insert(0, str(Path(__file__).parent))
from metalemu_cuda_host import bf16, from_bf16, host_metal_kernel, run_metal  # noqa: E402

pytestmark = pytest.mark.skipif(host_compiler() is None, reason="LOUD SKIP: no clang++/g++: the CUDA engine's "
                                "translations are not executed on the CPU")

SIMD = r"""
    const uint i = thread_position_in_grid.x;
    const float v = x[i];
    const uint u = uint(i * 2654435761u) >> 20;
    float r[K];
    r[0] = simd_sum(v); r[1] = simd_max(v); r[2] = simd_min(v);
    r[3] = simd_prefix_inclusive_sum(v); r[4] = simd_prefix_exclusive_sum(v);
    r[5] = simd_shuffle_xor(v, ushort(1)); r[6] = simd_shuffle_up(v, ushort(2)); r[7] = simd_shuffle_down(v, 1u);
    r[8] = simd_broadcast(v, ushort(2)); r[9] = popcount(uint(simd_vote::vote_t(simd_ballot(v > 10.0f))));
    r[10] = simd_any(v > 60.0f) ? 1.0f : 0.0f; r[11] = simd_all(v > -30.0f) ? 1.0f : 0.0f;
    r[12] = quad_sum(v); r[13] = quad_shuffle(v, 3); r[14] = quad_broadcast(v, 0); r[15] = quad_max(v);
    r[16] = float(simd_and(u)); r[17] = float(simd_or(u)); r[18] = float(simd_xor(u));
    r[19] = simd_shuffle_and_fill_up(v, -v, ushort(2)); r[20] = simd_shuffle_and_fill_down(v, -v, ushort(3), ushort(8));
    r[21] = float(threads_per_threadgroup.x); r[22] = float(simdgroups_per_threadgroup);
    r[23] = float(thread_index_in_simdgroup + 100 * simdgroup_index_in_threadgroup);
    r[24] = simd_broadcast_first(v); r[25] = simd_is_first() ? 1.0f : 0.0f;
    r[26] = float(simd_prefix_exclusive_sum(int(i % 3)));
    r[27] = float(simd_sum(half(v)));
    for (int k = 0; k < K; ++k) out[i * K + k] = r[k];
"""
K = 28


def _segments(n: int, tg: int, width: int) -> list[tuple[int, int]]:
    """(start, live lanes) of every SIMD-group (width 32) or quad (width 4) of a 1-D dispatch of n threads."""
    out = []
    for g0 in range(0, n, tg):
        size = min(tg, n - g0)
        for w0 in range(g0, g0 + size, width):
            out.append((w0, min(width, g0 + size - w0)))
    return out


def test_simd_and_quad_functions_with_a_partial_last_threadgroup() -> None:
    n, tg = 100, 64  # threadgroups of 64 and 36: SIMD-groups of 32, 32, 32 and 4 lanes
    x = ((np.arange(n) * 37) % 101 - 20).astype(np.float32)
    out, = run_metal("simd", ["x"], ["out"], SIMD, inputs=[x], output_shapes=[(n * K,)], output_dtypes=["float32"],
                     grid=(n, 1, 1), threadgroup=(tg, 1, 1), template=[("K", K)])
    out = out.reshape(n, K)
    u = ((np.arange(n, dtype=np.uint64) * 2654435761) % 2**32 >> 20).astype(np.uint32)
    for w0, live in _segments(n, tg, 32):
        s = slice(w0, w0 + live)
        seg, lanes = x[s], np.arange(live)
        exp = {0: seg.sum(), 1: seg.max(), 2: seg.min(), 3: np.cumsum(seg), 4: np.cumsum(seg) - seg,
               5: seg[lanes ^ 1], 6: np.where(lanes >= 2, seg[np.maximum(lanes - 2, 0)], seg),
               7: np.where(lanes + 1 < live, seg[np.minimum(lanes + 1, live - 1)], seg), 8: seg[2],
               9: (seg > 10).sum(), 10: float((seg > 60).any()), 11: float((seg > -30).all()),
               16: np.bitwise_and.reduce(u[s]), 17: np.bitwise_or.reduce(u[s]), 18: np.bitwise_xor.reduce(u[s]),
               21: min(tg, n - (w0 // tg) * tg), 22: -(-min(tg, n - (w0 // tg) * tg) // 32),
               23: lanes + 100 * ((w0 % tg) // 32), 24: seg[0], 25: (lanes == 0).astype(np.float32),
               26: np.cumsum(np.arange(w0, w0 + live) % 3) - np.arange(w0, w0 + live) % 3}
        for k, want in exp.items():
            np.testing.assert_allclose(out[s, k], np.broadcast_to(want, (live,)), rtol=1e-6, err_msg=f"column {k}")
        if live == 32:  # the fill shuffles read lanes across the whole SIMD-group
            fill_up = np.where(lanes >= 2, seg[lanes - 2], -seg[(lanes + 30) % 32])
            j, base = lanes % 8, lanes - lanes % 8
            fill_dn = np.where(j + 3 < 8, seg[base + np.minimum(j + 3, 7)], -seg[base + (j + 3) % 8])
            np.testing.assert_allclose(out[s, 19], fill_up)
            np.testing.assert_allclose(out[s, 20], fill_dn)
        np.testing.assert_allclose(out[s, 27], np.float16(seg).astype(np.float32).sum(), rtol=2e-3)
    for q0, live in _segments(n, tg, 4):
        s = slice(q0, q0 + live)
        seg = x[s]
        np.testing.assert_allclose(out[s, 12], seg.sum())
        np.testing.assert_allclose(out[s, 15], seg.max())
        np.testing.assert_allclose(out[s, 14], seg[0])
        if live == 4:
            np.testing.assert_allclose(out[s, 13], seg[3])


GEOMETRY = r"""
    threadgroup int slot[64];
    const uint tid = thread_index_in_threadgroup;
    const uint n = threads_per_threadgroup.x * threads_per_threadgroup.y;
    slot[tid] = int(tid) * 10;
    threadgroup_barrier(mem_flags::mem_threadgroup);
    const int next = slot[(tid + 1) % n];
    const uint2 p = thread_position_in_grid.xy;
    device int* o = out + (p.y * threads_per_grid.x + p.x) * 12;
    o[0] = p.x; o[1] = p.y; o[2] = threadgroup_position_in_grid.x; o[3] = threadgroup_position_in_grid.y;
    o[4] = thread_position_in_threadgroup.x; o[5] = thread_position_in_threadgroup.y;
    o[6] = threads_per_threadgroup.x; o[7] = threads_per_threadgroup.y; o[8] = tid; o[9] = next;
    o[10] = threadgroups_per_grid.x * 100 + threadgroups_per_grid.y; o[11] = dispatch_threads_per_threadgroup.x;
"""


def test_a_2d_grid_with_smaller_edge_threadgroups_and_a_barrier() -> None:
    gx, gy, tx, ty = 10, 7, 4, 4
    out, = run_metal("geometry", ["x"], ["out"], GEOMETRY, inputs=[np.zeros(1, np.float32)],
                     output_shapes=[(gy, gx, 12)], output_dtypes=["int32"], grid=(gx, gy, 1), threadgroup=(tx, ty, 1))
    for y in range(gy):
        for x in range(gx):
            gpx, gpy = x // tx, y // ty
            ax, ay = min(tx, gx - gpx * tx), min(ty, gy - gpy * ty)  # the group's real size
            lx, ly = x - gpx * tx, y - gpy * ty
            tid = ly * ax + lx  # linearised with the real size
            want = [x, y, gpx, gpy, lx, ly, ax, ay, tid, ((tid + 1) % (ax * ay)) * 10, 3 * 100 + 2, tx]
            assert list(out[y, x]) == want, (x, y)


def test_an_unguarded_kernel_relies_on_the_smaller_last_threadgroup() -> None:
    src = "o[thread_position_in_grid.x] = x[thread_position_in_grid.x] * 2.0f;"
    x = np.arange(70, dtype=np.float32)
    o, = run_metal("unguarded", ["x"], ["o"], src, inputs=[x], output_shapes=[(70,)], output_dtypes=["float32"],
                   grid=(70, 1, 1), threadgroup=(32, 1, 1))  # the runner's guard zone catches any write past o
    np.testing.assert_array_equal(o, 2 * x)


TYPES = r"""
    const uint i = thread_position_in_grid.x;
    const half h = x[i];
    const float f = float(h);
    half h2 = h * h + 0.5h;
    float mixed = h * 2.0f;
    bfloat b = bfloat(f);
    float4 v = float4(f, 1.0, 2, float(h2));
    v.xy = v.yx;
    v.zw += float2(1.0f, 2.0f);
    float3 w = v.zyx * 2;
    half4 hv = half4(v);
    float t = (i % 2 == 0) ? h : 0.25f;
    const device packed_float3* pp = (const device packed_float3*)pf;
    const device float3* fp = (const device float3*)pf;
    float r[K];
    r[0] = float(h2); r[1] = mixed; r[2] = float(b) + 1.0bf; r[3] = v.x; r[4] = v.y; r[5] = w.x; r[6] = dot(v, v);
    r[7] = float(hv.w); r[8] = t; r[9] = fast::exp(f * 0.1f); r[10] = precise::log(abs(f) + 1.0f);
    r[11] = clamp(f, -1.0f, 1.0f); r[12] = mix(f, 2.0f, 0.25f); r[13] = fract(f); r[14] = sign(f);
    r[15] = select(1.0f, 2.0f, f > 0); r[16] = as_type<float>(as_type<uint>(f)); r[17] = float(max(h, half(0)));
    r[18] = rsqrt(abs(f) + 1.0f); r[19] = length(float2(3, 4)); r[20] = pp[1].x + 10 * fp[1].x;
    r[21] = metal::exp2(f * 0.25f) + M_PI_F; r[22] = float(uint(-1) > 0u) + float(Limits<half>::max > 1e4h);
    r[23] = float(T(f) * T(3)); r[24] = isnan(f / 0.0f) ? 1.0f : 0.0f; r[25] = float(all(v.xy > -100.0f));
    for (int k = 0; k < K; ++k) out[i * K + k] = r[k];
"""


def test_half_bfloat_vectors_swizzles_math_and_literals() -> None:
    n, k = 40, 26
    x = np.linspace(-3, 3, n).astype(np.float16)
    pf = np.arange(16, dtype=np.float32)
    out, = run_metal("types", ["x", "pf"], ["out"], TYPES, inputs=[x, pf], output_shapes=[(n * k,)],
                     output_dtypes=["float32"], grid=(n, 1, 1), threadgroup=(32, 1, 1),
                     template=[("K", k), ("T", "bfloat16")])
    out = out.reshape(n, k)
    f = x.astype(np.float32)
    h2 = (np.float16(x * x) + np.float16(0.5)).astype(np.float32)
    bfr = from_bf16(bf16(f))
    v = np.stack([np.ones(n), f, 2 + np.ones(n), h2 + 2], axis=1).astype(np.float32)
    want = {0: h2, 1: f * 2, 2: bfr + 1, 3: 1, 4: f, 5: (2 + 1) * 2, 6: (v * v).sum(1), 7: h2 + 2,
            8: np.where(np.arange(n) % 2 == 0, f, 0.25), 9: np.exp(f * 0.1), 10: np.log(np.abs(f) + 1),
            11: np.clip(f, -1, 1), 12: f + (2 - f) * 0.25, 13: f - np.floor(f), 14: np.sign(f),
            15: np.where(f > 0, 2, 1), 16: f, 17: np.maximum(f, 0), 18: 1 / np.sqrt(np.abs(f) + 1), 19: 5,
            20: 3 + 10 * 4, 21: np.exp2(f * 0.25) + np.pi, 22: 2, 23: from_bf16(bf16(from_bf16(bf16(f)) * 3)),
            24: 0, 25: 1}
    for col, w in want.items():
        np.testing.assert_allclose(out[:, col], np.broadcast_to(w, (n,)), rtol=2e-3, atol=1e-3, err_msg=f"col {col}")
    assert not np.isnan(out[:, 24]).any()


ATOMICS = r"""
    const uint i = thread_position_in_grid.x;
    atomic_fetch_add_explicit(&hist[x[i] % 8], 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&total[0], float(x[i]), memory_order_relaxed);
    threadgroup atomic_int cnt;
    if (thread_index_in_threadgroup == 0) atomic_store_explicit(&cnt, 0, memory_order_relaxed);
    threadgroup_barrier(mem_flags::mem_threadgroup);
    atomic_fetch_add_explicit(&cnt, 1, memory_order_relaxed);
    threadgroup_barrier(mem_flags::mem_threadgroup);
    if (thread_index_in_threadgroup == 0)
        atomic_fetch_max_explicit(&hist[8], atomic_load_explicit(&cnt, memory_order_relaxed), memory_order_relaxed);
    int expected = 5;
    if (i == 0) {
        atomic_compare_exchange_weak_explicit(&hist[9], &expected, 7, memory_order_relaxed, memory_order_relaxed);
        atomic_exchange_explicit(&hist[10], 3, memory_order_relaxed);
    }
"""


def test_atomic_outputs_and_threadgroup_atomics() -> None:
    n = 150
    x = ((np.arange(n) * 7) % 23).astype(np.int32)
    hist, total = run_metal("atomics", ["x"], ["hist", "total"], ATOMICS, inputs=[x], output_shapes=[(11,), (1,)],
                            output_dtypes=["int32", "float32"], grid=(n, 1, 1), threadgroup=(64, 1, 1),
                            init_value=0, atomic_outputs=True)
    assert list(hist[:8]) == [int((x % 8 == b).sum()) for b in range(8)]
    assert hist[8] == 64 and hist[9] == 0 and hist[10] == 3  # 0 != 5: the exchange fails and leaves 0
    assert total[0] == pytest.approx(float(x.sum()))


MATRIX = r"""
    simdgroup_matrix<half, 8, 8> A;
    simdgroup_float8x8 B, C, D, Bt;
    simdgroup_load(A, a, 8);
    simdgroup_load(B, b, 8);
    simdgroup_load(C, c, 8);
    simdgroup_multiply_accumulate(D, A, B, C);
    simdgroup_store(D, d1, 8);
    simdgroup_load(Bt, b, 8, ulong2(0, 0), true);
    simdgroup_multiply(D, A, Bt);
    simdgroup_store(D, d2, 8);
    simdgroup_float8x8 I2 = simdgroup_float8x8(2.0f);
    simdgroup_multiply(D, I2, C);
    simdgroup_store(D, d3, 16, ulong2(8, 0));
    const uint lane = thread_index_in_simdgroup;
    const float2 e = C.thread_elements();
    d4[lane * 2] = e.x; d4[lane * 2 + 1] = e.y;
    simdgroup_half8x8 H = make_filled_simdgroup_matrix<half, 8, 8>(half(1));
    simdgroup_multiply_accumulate(H, A, H, H);
    simdgroup_store(H, d5, 8, ulong2(0, 0), true);
"""


def test_simdgroup_matrix_layout_and_products() -> None:
    rng = np.random.default_rng(0)
    a = rng.standard_normal((8, 8)).astype(np.float16)
    b = rng.standard_normal((8, 8)).astype(np.float32)
    c = rng.standard_normal((8, 8)).astype(np.float32)
    d1, d2, d3, d4, d5 = run_metal(
        "matrix", ["a", "b", "c"], ["d1", "d2", "d3", "d4", "d5"], MATRIX, inputs=[a, b, c],
        output_shapes=[(8, 8), (8, 8), (8, 16), (64,), (8, 8)],
        output_dtypes=["float32", "float32", "float32", "float32", "float16"], grid=(32, 1, 1), threadgroup=(32, 1, 1))
    af = a.astype(np.float32)
    np.testing.assert_allclose(d1, af @ b + c, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(d2, af @ b.T, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(d3[:, 8:], 2 * c, rtol=1e-6)
    lanes = np.arange(32)
    rows = ((lanes // 4) & 4) + (lanes // 2) % 4  # Apple's layout (MLX steel's get_coord)
    cols = ((lanes // 4) & 2) * 2 + (lanes % 2) * 2
    np.testing.assert_array_equal(d4.reshape(32, 2), np.stack([c[rows, cols], c[rows, cols + 1]], axis=1))
    np.testing.assert_allclose(d5.astype(np.float32), (af @ np.ones((8, 8)) + 1).T, rtol=2e-3)


HEADER = r"""
#include <metal_stdlib>
using namespace metal;
constant float LUT[4] = {1.0, 2.0, 4.0, 8.0};
struct Pair { float a; float b; float sum() const thread { return a + b; } };
template <typename U> METAL_FUNC U twice(U v) { return v * 2; }
#define SQ(v) ((v) * (v))
"""
PREAMBLE = r"""
    const uint i = thread_position_in_grid.x;
    Pair p;
    p.a = LUT[i % 4];
    p.b = twice(float(i));
    const int64_t loc = elem_to_loc(int64_t(i), x_shape, x_strides, x_ndim);
    out[i] = x[loc] + p.sum() * 1000.0f + SQ(2.0f) * 100000.0f
             + (Limits<float>::finite_max == FLT_MAX ? 1e6f : 0.0f) + float(ceildiv(7, 2)) * 1e7f;
"""


def test_header_structs_macros_and_mlx_helpers_on_a_strided_input() -> None:
    base = np.arange(24, dtype=np.float32).reshape(4, 6)
    x = base.T  # a strided view: elem_to_loc must follow the strides
    out, = run_metal("preamble", ["x"], ["out"], PREAMBLE, HEADER, inputs=[x], output_shapes=[(24,)],
                     output_dtypes=["float32"], grid=(24, 1, 1), threadgroup=(24, 1, 1), ensure_row_contiguous=False)
    i = np.arange(24)
    want = x.reshape(-1) + (np.array([1, 2, 4, 8])[i % 4] + 2 * i) * 1000 + 4 * 100000 + 1e6 + 4 * 1e7
    np.testing.assert_allclose(out, want, rtol=1e-6)


@pytest.fixture
def host_mlx(monkeypatch):
    """mx.fast.metal_kernel replaced by the host runner of the CUDA translation; the library's kernel caches cleared."""
    mx = pytest.importorskip("mlx.core")
    monkeypatch.setattr(mx.fast, "metal_kernel", host_metal_kernel)
    from ksearch.kernels.attention import metal_rows, metal_simdgroup
    from ksearch.kernels.decode import metal_split_k
    from ksearch.kernels.selective_scan import metal as scan_metal

    caches = [metal_simdgroup._kernel, metal_rows._prefill_kernel, metal_split_k._decode_kernels,
              scan_metal.scan_kernel, scan_metal.conv_kernel, scan_metal.step_kernel]
    for c in caches:
        c.cache_clear()
    yield mx
    for c in caches:
        c.cache_clear()


def _attention_ref(mx, q, k, v, causal):
    hq, hkv = q.shape[1], k.shape[1]
    k = mx.repeat(k, hq // hkv, axis=1).astype(mx.float32)
    v = mx.repeat(v, hq // hkv, axis=1).astype(mx.float32)
    s = (q.astype(mx.float32) @ k.transpose(0, 1, 3, 2)) / np.sqrt(q.shape[-1])
    if causal:
        L, S = q.shape[2], k.shape[2]
        s = mx.where(mx.arange(S)[None] <= mx.arange(L)[:, None] + (S - L), s, -np.inf)
    return mx.softmax(s, axis=-1) @ v


@pytest.mark.parametrize("causal", [False, True])
def test_library_simdgroup_matrix_attention_runs_translated(host_mlx, causal) -> None:
    mx = host_mlx
    from ksearch.kernels.attention.metal_simdgroup import attention_metal_mma

    k0, k1, k2 = mx.random.split(mx.random.key(1), 3)
    q = mx.random.normal((1, 2, 40, 64), key=k0).astype(mx.float16)  # 40 rows: a partial block of 32
    k = mx.random.normal((1, 1, 48, 64), key=k1).astype(mx.float16)
    v = mx.random.normal((1, 1, 48, 64), key=k2).astype(mx.float16)
    got = attention_metal_mma(q, k, v, causal=causal).astype(mx.float32)
    np.testing.assert_allclose(np.array(got), np.array(_attention_ref(mx, q, k, v, causal)), atol=2e-2, rtol=2e-2)


def test_library_row_attention_and_split_k_decode_run_translated(host_mlx) -> None:
    mx = host_mlx
    from ksearch.kernels.attention.metal_rows import attention_metal
    from ksearch.kernels.decode.metal_split_k import decode_metal

    k0, k1, k2 = mx.random.split(mx.random.key(2), 3)
    q = mx.random.normal((1, 2, 20, 64), key=k0)
    k = mx.random.normal((1, 2, 20, 64), key=k1)
    v = mx.random.normal((1, 2, 20, 64), key=k2)
    np.testing.assert_allclose(np.array(attention_metal(q, k, v, causal=True)),
                               np.array(_attention_ref(mx, q, k, v, True)), atol=1e-4, rtol=1e-4)
    qd = mx.random.normal((1, 4, 1, 64), key=k0).astype(mx.float16)
    kc = mx.random.normal((1, 2, 300, 64), key=k1).astype(mx.float16)
    vc = mx.random.normal((1, 2, 300, 64), key=k2).astype(mx.float16)
    got = decode_metal(qd, kc, vc, 257, warps=2, target_blocks=4)
    want = _attention_ref(mx, qd, kc[:, :, :257], vc[:, :, :257], False)
    np.testing.assert_allclose(np.array(got.astype(mx.float32)), np.array(want), atol=2e-2, rtol=2e-2)
