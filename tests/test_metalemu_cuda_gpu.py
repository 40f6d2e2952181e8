"""GPU checks of the Metal emulation's CUDA engine (marker gpu: skipped in CI; run on an NVIDIA GPU with mlx[cuda]).

Metal kernels run through `metal_kernel_via_cuda` (mx.fast.cuda_kernel underneath): every construct family against
NumPy (tests/metalemu_cuda_cases.py: SIMD-group and quad functions, partial last threadgroups, 2-D geometry, types and
math, atomics, simdgroup_matrix products, header and MLX helpers), then every Metal kernel of ksearch.kernels, every
task's Metal starter and two renderings of each Metal template family at the gpu-tier shapes against the tasks' MLX
references, judged by the harness's judge. These call `mx.fast.metal_kernel`, which is replaced by
`metal_kernel_via_cuda` here (as the mlx-metal-emu backend does in its workers). About 50 kernels are compiled by
NVRTC (a few seconds each): the file runs in two to three minutes on an H200.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

os.environ.setdefault("MLX_ENABLE_TF32", "0")  # float32 references need real float32 matmuls

mx = pytest.importorskip("mlx.core")

from ksearch.metalemu.cuda_kernel import metal_kernel_via_cuda  # noqa: E402

sys.path.insert(0, str(Path(__file__).parent))
from metalemu_cuda_cases import CASES, Case, judge_task, library_kernel_caches, load_starter, run_case_mlx  # noqa: E402

pytestmark = pytest.mark.gpu

if not (hasattr(mx, "cuda") and mx.cuda.is_available()):
    pytest.skip("no CUDA GPU for MLX here: the CUDA engine is not run", allow_module_level=True)

STARTERS = Path(__file__).resolve().parents[1] / "src" / "ksearch" / "tasks" / "starters"


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_construct_family(case: Case) -> None:
    outs, inputs = run_case_mlx(case, metal_kernel_via_cuda)
    case.check(outs, inputs)


def test_threads_past_the_grid_never_run() -> None:
    # 70 threads in threadgroups of 32: the last group has 6 threads; an output of 128 must keep its tail.
    kernel = metal_kernel_via_cuda("tail", ["x"], ["o"], "o[thread_position_in_grid.x] = x[0] + 1.0f;")
    o, = kernel(inputs=[mx.zeros((1,))], output_shapes=[(128,)], output_dtypes=[mx.float32], grid=(70, 1, 1),
                threadgroup=(32, 1, 1), init_value=-1.0)
    o = np.array(o)
    assert (o[:70] == 1).all() and (o[70:] == -1).all()


@pytest.fixture
def via_cuda(monkeypatch):
    """mx.fast.metal_kernel replaced by the CUDA engine; the library's cached kernel objects rebuilt."""
    monkeypatch.setattr(mx.fast, "metal_kernel", metal_kernel_via_cuda)
    for c in library_kernel_caches():
        c.cache_clear()
    yield
    for c in library_kernel_caches():
        c.cache_clear()


def test_library_attention_kernels(via_cuda) -> None:
    from ksearch.kernels.attention.metal_rows import attention_metal
    from ksearch.kernels.attention.metal_simdgroup import attention_metal_mma, supports

    def run(q, k, v, causal):
        return attention_metal_mma(q, k, v, causal) if supports(q, k, v, causal) else attention_metal(q, k, v, causal)

    judge_task("attention", run)
    judge_task("attention", run, tier="cpu")  # float32 on the simdgroup kernel (the search workloads of that tier)
    judge_task("attention", attention_metal, workloads=1)  # the row kernel on float16 too


def test_library_attention_with_the_softmax_in_registers(via_cuda) -> None:
    from ksearch.kernels.attention.metal_fragments import attention_metal_fragments
    from ksearch.kernels.attention.metal_simdgroup import supports

    def run(q, k, v, causal):
        assert supports(q, k, v, causal)
        return attention_metal_fragments(q, k, v, causal)

    judge_task("attention", run, workloads=2)  # the float16 search workloads, with and without the mask


def test_library_split_k_decode(via_cuda) -> None:
    from ksearch.kernels.decode.metal_split_k import decode_metal

    judge_task("gqa_decode", decode_metal)


def test_library_mamba_kernels(via_cuda) -> None:
    from ksearch.kernels.selective_scan import metal as scan_metal

    judge_task("selective_scan", scan_metal.scan)
    judge_task("selective_state_update", scan_metal.mixer_step)
    # The causal depthwise conv + SiLU of the prefill path, against MLX ops.
    k0, k1, k2 = mx.random.split(mx.random.key(3), 3)
    x = mx.random.normal((2, 512, 2048), key=k0).astype(mx.float16)
    w = mx.random.normal((2048, 4), key=k1) * 0.5
    b = mx.random.normal((2048,), key=k2) * 0.1
    y, state = scan_metal.conv_silu(x, w, b, None)
    xf = mx.pad(x.astype(mx.float32), [(0, 0), (3, 0), (0, 0)])
    acc = sum(xf[:, j:j + 512, :] * w[:, j] for j in range(4)) + b
    want = acc * mx.sigmoid(acc)
    np.testing.assert_allclose(np.array(y.astype(mx.float32)), np.array(want), atol=2e-2, rtol=2e-2)
    np.testing.assert_array_equal(np.array(state), np.array(x[:, -3:, :]))


@pytest.mark.parametrize("task_name", ["softmax", "rmsnorm", "attention", "gqa_decode", "selective_scan",
                                       "selective_state_update"])
def test_task_metal_starter(via_cuda, task_name) -> None:
    judge_task(task_name, load_starter(STARTERS / f"{task_name}_metal.py")["run"])


def _renderings() -> list[tuple[Any, int]]:
    from ksearch.policy.templates import all_families

    out = []
    for fam in all_families():
        if "mlx-metal" in fam.backends:
            params = [p for p in fam.all_params() if fam.valid(p)]
            out += [(fam, i) for i in sorted({0, len(params) - 1})]
    return out


@pytest.mark.parametrize(("fam", "index"), _renderings(), ids=lambda x: getattr(x, "id", str(x)))
def test_metal_template_family_renderings(via_cuda, fam, index) -> None:
    params = [p for p in fam.all_params() if fam.valid(p)][index]
    namespace: dict[str, Any] = {}
    exec(compile(fam.source(params), fam.id, "exec"), namespace)
    judge_task(fam.tasks[0], namespace["run"], workloads=1)
