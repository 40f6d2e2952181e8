"""The CUDA engine's translation, run on the CPU (tests/metalemu_cuda_host.py), against NumPy: every construct family
(tests/metalemu_cuda_cases.py: SIMD-group and quad functions, the smaller last threadgroup, 2-D geometry, types and
math, atomics, simdgroup_matrix, header and MLX helpers) and the library's Metal kernels through a stand-in for
mx.fast.metal_kernel. The text compiled here is the text the engine hands to NVRTC; only the CUDA builtins differ
(cuda_host.h: one OS thread per CUDA thread, real barriers)."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

from ksearch.metalemu.cuda_check import host_compiler

sys.path.insert(0, str(Path(__file__).parent))
from metalemu_cuda_cases import CASES, Case, judge_task, library_kernel_caches, load_starter, run_case_mlx  # noqa: E402
from metalemu_cuda_host import host_cuda_kernel, host_metal_kernel, prepare, run_many, run_metal  # noqa: E402

from ksearch.metalemu.cuda_kernel import metal_kernel_via_cuda  # noqa: E402

STARTERS = Path(__file__).resolve().parents[1] / "src" / "ksearch" / "tasks" / "starters"

# The module fixture compiles every case once: the module stays in one pytest-xdist worker.
pytestmark = [pytest.mark.skipif(host_compiler() is None, reason="LOUD SKIP: no clang++/g++: the CUDA engine's "
                                 "translations are not executed on the CPU"),
              pytest.mark.xdist_group("metalemu_cuda_host")]


@pytest.fixture(scope="module")
def case_outputs() -> dict[str, tuple[list, list]]:
    """Every case compiled into one library (one compiler start), each run once."""
    inputs = {c.id: c.inputs() for c in CASES}
    calls = [prepare(c.id, c.input_names, c.output_names, c.source, c.header, inputs=inputs[c.id],
                     output_shapes=c.output_shapes, output_dtypes=c.output_dtypes, grid=c.grid,
                     threadgroup=c.threadgroup, template=c.template, init_value=c.init_value,
                     atomic_outputs=c.atomic_outputs, ensure_row_contiguous=c.ensure_row_contiguous) for c in CASES]
    return {c.id: (outs, inputs[c.id]) for c, outs in zip(CASES, run_many(calls), strict=True)}


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_construct_family(case: Case, case_outputs) -> None:
    outs, inputs = case_outputs[case.id]
    case.check(outs, inputs)


def test_a_write_past_an_output_is_caught_by_the_runner() -> None:
    # The guard the unguarded-kernel case relies on: a kernel that does write one element too far is reported.
    src = "o[thread_position_in_grid.x + 1] = 1.0f;"
    with pytest.raises(AssertionError, match="past the end"):
        run_metal("oob", ["x"], ["o"], src, inputs=[np.zeros(4, np.float32)], output_shapes=[(64,)],
                  output_dtypes=["float32"], grid=(64, 1, 1), threadgroup=(32, 1, 1))


@pytest.fixture
def host_mlx(monkeypatch):
    """mx.fast.metal_kernel replaced by the host runner of the CUDA translation; the library's kernel caches cleared."""
    mx = pytest.importorskip("mlx.core")
    monkeypatch.setattr(mx.fast, "metal_kernel", host_metal_kernel)
    caches = library_kernel_caches()
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


@pytest.mark.parametrize("causal", [True])  # the GPU test runs both; one instantiation keeps this file quick
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


# ---- metal_kernel_via_cuda end to end: MLX arrays in, mx.fast.cuda_kernel called, MLX arrays out ----

END_TO_END = ("simd_and_quad_partial_threadgroup", "types_vectors_math_literals", "atomics",
              "header_and_mlx_helpers_strided")


@pytest.fixture
def host_cuda(monkeypatch):
    """mx.fast.cuda_kernel replaced by a host stand-in that generates and launches the kernel as MLX does."""
    mx = pytest.importorskip("mlx.core")
    monkeypatch.setattr(mx.fast, "cuda_kernel", host_cuda_kernel, raising=False)
    return mx


@pytest.mark.parametrize("case", [c for c in CASES if c.id in END_TO_END], ids=lambda c: c.id)
def test_metal_kernel_via_cuda_end_to_end(host_cuda, case: Case) -> None:
    outs, inputs = run_case_mlx(case, metal_kernel_via_cuda)
    case.check(outs, inputs)


def test_a_task_starter_through_mx_fast_metal_kernel(host_cuda, monkeypatch) -> None:
    # What the GPU test does at the gpu-tier shapes, here at the cpu-tier ones: the starter builds its kernel through
    # mx.fast.metal_kernel, which is the CUDA engine.
    monkeypatch.setattr(host_cuda.fast, "metal_kernel", metal_kernel_via_cuda)
    judge_task("softmax", load_starter(STARTERS / "softmax_metal.py")["run"], tier="cpu", workloads=1)


def test_zero_sized_dispatch_and_call_errors(host_cuda) -> None:
    mx = host_cuda
    k = metal_kernel_via_cuda("noop", ["x"], ["o"], "o[0] = x[0];")
    o, = k(inputs=[mx.zeros((1,))], output_shapes=[(3,)], output_dtypes=[mx.float32], grid=(0, 1, 1),
           threadgroup=(32, 1, 1), init_value=2.0)
    assert np.array(o).tolist() == [2.0, 2.0, 2.0]
    with pytest.raises(ValueError, match="Expected `inputs` to have size 1 but got size 2"):
        k(inputs=[mx.zeros((1,)), mx.zeros((1,))], output_shapes=[(3,)], output_dtypes=[mx.float32],
          grid=(1, 1, 1), threadgroup=(1, 1, 1))
