"""Construct families of the Metal emulation's CUDA engine as runnable cases, each with its NumPy check.

One list serves two runners: tests/test_metalemu_cuda_host.py runs the translation on the CPU, and
tests/test_metalemu_cuda_gpu.py runs it on an NVIDIA GPU through mx.fast.cuda_kernel. A runner takes a Case and
returns the outputs as NumPy arrays (bfloat16 outputs as uint16 bit patterns).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np


def bf16(x: np.ndarray) -> np.ndarray:
    """float32 -> bfloat16 bit patterns (round to nearest even), as uint16."""
    u = np.asarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)


def from_bf16(b: np.ndarray) -> np.ndarray:
    return (np.asarray(b).astype(np.uint32) << 16).view(np.float32)


@dataclass
class Case:
    id: str
    input_names: Sequence[str]
    output_names: Sequence[str]
    source: str
    inputs: Callable[[], list[Any]]  # NumPy arrays, or ("bfloat16", uint16 array)
    output_shapes: Sequence[Sequence[int]]
    output_dtypes: Sequence[str]
    grid: tuple[int, int, int]
    threadgroup: tuple[int, int, int]
    check: Callable[[list[np.ndarray], list[Any]], None]
    header: str = ""
    template: Sequence[tuple[str, Any]] = field(default_factory=list)
    init_value: float | None = None
    atomic_outputs: bool = False
    ensure_row_contiguous: bool = True


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
    r[23] = float(T(f) * T(3)); r[24] = isnan(f - f + NAN) ? 1.0f : 0.0f; r[25] = float(all(v.xy > -100.0f));
    for (int k = 0; k < K; ++k) out[i * K + k] = r[k];
"""

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

K_SIMD = 28
N_TYPES = 26


def _segments(n: int, tg: int, width: int) -> list[tuple[int, int]]:
    """(start, live lanes) of every SIMD-group (width 32) or quad (width 4) of a 1-D dispatch of n threads."""
    out = []
    for g0 in range(0, n, tg):
        size = min(tg, n - g0)
        for w0 in range(g0, g0 + size, width):
            out.append((w0, min(width, g0 + size - w0)))
    return out


def _check_simd(outs: list[np.ndarray], inputs: list[Any], n: int = 100, tg: int = 64) -> None:
    x = inputs[0]
    out = outs[0].reshape(n, K_SIMD)
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


def _check_geometry(outs: list[np.ndarray], inputs: list[Any], gx: int = 10, gy: int = 7, tx: int = 4,
                    ty: int = 4) -> None:
    out = outs[0]
    for y in range(gy):
        for x in range(gx):
            gpx, gpy = x // tx, y // ty
            ax, ay = min(tx, gx - gpx * tx), min(ty, gy - gpy * ty)  # the group's real size
            lx, ly = x - gpx * tx, y - gpy * ty
            tid = ly * ax + lx  # linearised with the real size
            want = [x, y, gpx, gpy, lx, ly, ax, ay, tid, ((tid + 1) % (ax * ay)) * 10, 3 * 100 + 2, tx]
            assert list(out[y, x]) == want, (x, y)


def _check_types(outs: list[np.ndarray], inputs: list[Any]) -> None:
    x = inputs[0]
    n = x.shape[0]
    out = outs[0].reshape(n, N_TYPES)
    f = x.astype(np.float32)
    h2 = (np.float16(x * x) + np.float16(0.5)).astype(np.float32)
    bfr = from_bf16(bf16(f))
    v = np.stack([np.ones(n), f, 2 + np.ones(n), h2 + 2], axis=1).astype(np.float32)
    want = {0: h2, 1: f * 2, 2: bfr + 1, 3: 1, 4: f, 5: (2 + 1) * 2, 6: (v * v).sum(1), 7: h2 + 2,
            8: np.where(np.arange(n) % 2 == 0, f, 0.25), 9: np.exp(f * 0.1), 10: np.log(np.abs(f) + 1),
            11: np.clip(f, -1, 1), 12: f + (2 - f) * 0.25, 13: f - np.floor(f), 14: np.sign(f),
            15: np.where(f > 0, 2, 1), 16: f, 17: np.maximum(f, 0), 18: 1 / np.sqrt(np.abs(f) + 1), 19: 5,
            20: 3 + 10 * 4, 21: np.exp2(f * 0.25) + np.pi, 22: 2, 23: from_bf16(bf16(from_bf16(bf16(f)) * 3)),
            24: 1, 25: 1}
    for col, w in want.items():
        np.testing.assert_allclose(out[:, col], np.broadcast_to(w, (n,)), rtol=2e-3, atol=1e-3, err_msg=f"col {col}")


def _check_atomics(outs: list[np.ndarray], inputs: list[Any]) -> None:
    x = inputs[0]
    hist, total = outs
    assert list(hist[:8]) == [int((x % 8 == b).sum()) for b in range(8)]
    assert hist[8] == 64 and hist[9] == 0 and hist[10] == 3  # 0 != 5: the exchange fails and leaves 0
    np.testing.assert_allclose(total[0], float(x.sum()), rtol=1e-6)


def _check_matrix(outs: list[np.ndarray], inputs: list[Any]) -> None:
    a, b, c = inputs
    d1, d2, d3, d4, d5 = outs
    af = a.astype(np.float32)
    np.testing.assert_allclose(d1, af @ b + c, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(d2, af @ b.T, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(d3[:, 8:], 2 * c, rtol=1e-6)
    lanes = np.arange(32)
    rows = ((lanes // 4) & 4) + (lanes // 2) % 4  # Apple's layout (MLX steel's get_coord)
    cols = ((lanes // 4) & 2) * 2 + (lanes % 2) * 2
    np.testing.assert_array_equal(d4.reshape(32, 2), np.stack([c[rows, cols], c[rows, cols + 1]], axis=1))
    np.testing.assert_allclose(d5.astype(np.float32), (af @ np.ones((8, 8)) + 1).T, rtol=2e-3)


def _check_preamble(outs: list[np.ndarray], inputs: list[Any]) -> None:
    x = inputs[0]
    i = np.arange(24)
    want = x.reshape(-1) + (np.array([1, 2, 4, 8])[i % 4] + 2 * i) * 1000 + 4 * 100000 + 1e6 + 4 * 1e7
    np.testing.assert_allclose(outs[0], want, rtol=1e-6)


def _check_unguarded(outs: list[np.ndarray], inputs: list[Any]) -> None:
    np.testing.assert_array_equal(outs[0], 2 * inputs[0])


def _matrix_inputs() -> list[Any]:
    rng = np.random.default_rng(0)
    return [rng.standard_normal((8, 8)).astype(np.float16), rng.standard_normal((8, 8)).astype(np.float32),
            rng.standard_normal((8, 8)).astype(np.float32)]


CASES = [
    Case("simd_and_quad_partial_threadgroup", ["x"], ["out"], SIMD,
         lambda: [((np.arange(100) * 37) % 101 - 20).astype(np.float32)], [(100 * K_SIMD,)], ["float32"],
         (100, 1, 1), (64, 1, 1), _check_simd, template=[("K", K_SIMD)]),
    Case("geometry_2d_edges_barrier", ["x"], ["out"], GEOMETRY, lambda: [np.zeros(1, np.float32)], [(7, 10, 12)],
         ["int32"], (10, 7, 1), (4, 4, 1), _check_geometry),
    Case("unguarded_last_threadgroup", ["x"], ["o"],
         "o[thread_position_in_grid.x] = x[thread_position_in_grid.x] * 2.0f;",
         lambda: [np.arange(70, dtype=np.float32)], [(70,)], ["float32"], (70, 1, 1), (32, 1, 1), _check_unguarded),
    Case("types_vectors_math_literals", ["x", "pf"], ["out"], TYPES,
         lambda: [np.linspace(-3, 3, 40).astype(np.float16), np.arange(16, dtype=np.float32)], [(40 * N_TYPES,)],
         ["float32"], (40, 1, 1), (32, 1, 1), _check_types, template=[("K", N_TYPES), ("T", "bfloat16")]),
    Case("atomics", ["x"], ["hist", "total"], ATOMICS, lambda: [((np.arange(150) * 7) % 23).astype(np.int32)],
         [(11,), (1,)], ["int32", "float32"], (150, 1, 1), (64, 1, 1), _check_atomics, init_value=0,
         atomic_outputs=True),
    Case("simdgroup_matrix", ["a", "b", "c"], ["d1", "d2", "d3", "d4", "d5"], MATRIX, _matrix_inputs,
         [(8, 8), (8, 8), (8, 16), (64,), (8, 8)], ["float32", "float32", "float32", "float32", "float16"],
         (32, 1, 1), (32, 1, 1), _check_matrix),
    Case("header_and_mlx_helpers_strided", ["x"], ["out"], PREAMBLE,
         lambda: [np.arange(24, dtype=np.float32).reshape(4, 6).T], [(24,)], ["float32"], (24, 1, 1), (24, 1, 1),
         _check_preamble, header=HEADER, ensure_row_contiguous=False),
]


# ---- running cases and tasks through an mx.fast.metal_kernel-like factory, with MLX arrays ----


def mx_input(x: Any) -> Any:
    import mlx.core as mx

    if isinstance(x, tuple):  # ("bfloat16", uint16 bits)
        return mx.array(x[1]).view(mx.bfloat16)
    a = np.asarray(x)
    if a.ndim == 2 and not a.flags.c_contiguous and a.T.flags.c_contiguous:
        return mx.array(np.ascontiguousarray(a.T)).T  # the same strided view, made in MLX
    return mx.array(a)


def run_case_mlx(case: Case, metal_kernel: Callable[..., Any]) -> tuple[list[np.ndarray], list[Any]]:
    """Build the case's kernel with `metal_kernel` (mx.fast.metal_kernel's signature) and call it with MLX arrays."""
    import mlx.core as mx

    inputs = case.inputs()
    kernel = metal_kernel(case.id, case.input_names, case.output_names, case.source, case.header,
                          ensure_row_contiguous=case.ensure_row_contiguous, atomic_outputs=case.atomic_outputs)
    template = [(n, getattr(mx, v) if isinstance(v, str) else v) for n, v in case.template]
    outs = kernel(inputs=[mx_input(x) for x in inputs], output_shapes=case.output_shapes,
                  output_dtypes=[getattr(mx, d) for d in case.output_dtypes], grid=case.grid,
                  threadgroup=case.threadgroup, template=template, init_value=case.init_value)
    mx.eval(outs)
    return [np.array(o.view(mx.uint16)) if d == "bfloat16" else np.array(o)
            for o, d in zip(outs, case.output_dtypes, strict=True)], inputs


def judge_task(task_name: str, run: Callable[..., Any], tier: str = "gpu", workloads: int | None = None) -> None:
    """run(**inputs, **params) on the tier's search workloads of a task, judged by the harness against the task's
    MLX reference."""
    import mlx.core as mx

    from ksearch.harness.judge import judge
    from ksearch.tasks import get_task
    from ksearch.tasks.inputs import make_inputs

    task = get_task(task_name)
    for w in task.select_workloads(tier)[:workloads]:  # type: ignore[arg-type]
        inputs = make_inputs(task, w, seed=1)
        outs = run(**inputs, **dict(w.params))
        outs = outs if isinstance(outs, tuple | list) else (outs,)
        ref = task.reference({k: v.astype(mx.float32) for k, v in inputs.items()}, **dict(w.params))
        mx.eval(list(outs), list(ref))
        dtypes = [str(o.dtype).rsplit(".", 1)[-1] for o in outs]
        verdict = judge(task, w, [np.array(o.astype(mx.float32)) for o in outs], dtypes,
                        [np.array(r.astype(mx.float32)) for r in ref])
        assert verdict.status == "passed", f"{task_name} {w.name}: {verdict.message}"


def library_kernel_caches() -> list[Any]:
    """The cached kernel objects of ksearch.kernels' Metal modules (rebuilt after mx.fast.metal_kernel changes)."""
    from ksearch.kernels.attention import metal_fragments, metal_rows, metal_simdgroup
    from ksearch.kernels.decode import metal_split_k
    from ksearch.kernels.selective_scan import metal as scan_metal

    return [metal_simdgroup._kernel, metal_fragments._kernel, metal_rows._prefill_kernel, metal_split_k._decode_kernels, scan_metal.scan_kernel,
            scan_metal.conv_kernel, scan_metal.step_kernel]


def load_starter(path: Any) -> dict[str, Any]:
    """A task starter's module namespace (its kernels are built by whatever mx.fast.metal_kernel is now)."""
    namespace: dict[str, Any] = {}
    exec(compile(path.read_text(), str(path), "exec"), namespace)
    return namespace
