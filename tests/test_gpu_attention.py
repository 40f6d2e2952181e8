"""GPU checks of the attention and decode kernels (marker `gpu`: skipped in CI; run on the H200 with mlx-cuda).

Every library configuration is checked against an fp32 reference in its own process (benchmarks/attention_gpu.py
check-*: an illegal instruction would poison the process's CUDA context), and a sample of every CUDA template
family's renderings passes the harness on the tasks' first GPU workload.
"""

from __future__ import annotations

import os
import random
import subprocess
import sys
from pathlib import Path

import pytest

from ksearch.harness import EvalOptions, evaluate
from ksearch.policy.templates import attention as attn_t
from ksearch.policy.templates import gqa_decode as dec_t
from ksearch.tasks import get_task

pytestmark = pytest.mark.gpu
ROOT = Path(__file__).parents[1]


@pytest.fixture(scope="module")
def cuda_backend():
    from ksearch.backends import BackendUnavailable, get_backend

    try:
        return get_backend("mlx-cuda")
    except BackendUnavailable as exc:
        pytest.skip(f"mlx-cuda is not available here: {exc}")


@pytest.mark.parametrize("kind", ["decode", "prefill"])
def test_every_library_configuration_matches_fp32(cuda_backend, kind, tmp_path):
    env = {**os.environ, "OUT": str(tmp_path), "PYTHONPATH": str(ROOT / "src")}
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "attention_gpu.py"), f"check-{kind}"],
                          capture_output=True, text=True, env=env, timeout=600)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]


# Options named outright: each warpgroup its own tiles with one block an item, the index arithmetic on the uniform
# datapath (`_uw`) with one block an item and on 128-key tiles, one pair of tensor maps a launch (none in the
# dispatch); and the dispatch's choices by shape, which its own small cases do not reach: the persistent items a
# section of heads at a time (`_hs`), and their last round split along the keys (`_kt`: with it the check adds
# shapes whose last round splits, and calls queued side by side) (docs/kernels-attention.md); and the split kernel
# with Q by the producer's tensor copies (`_qt`, opt-in); and the dispatch's D=128 kernel by name, with P's
# exponentials ahead of the tile's maximum (`_xa`, whose tile run again the check's rising and stepped scores reach)
# and without.
PREFILL_OPTIONS = ["ws3_n64_s4_p4_tmas_cr_wt", "ws3_n64_s4_p4_tmas_cr_uw", "ws2_n128_s3_p4_tmas_pst_sn_uw",
                   "ws3_n64_s4_p4_tmas_cr_m1", "ws3_n64_s4_p4_tmas_pst_preg32_cr_wt_sn_hs_uw",
                   "ws2_n128_s3_p4_tmas_pst_preg32_sn_hs", "ws3_n64_s4_p4_tmas_pst_preg32_cr_wt_sn_hs_kt_uw",
                   "ws3_n64_s4_p4_tmas_pst_preg32_cr_wt_sn_hs_kt_uw_qt",
                   "ws3_n64_s4_p4_tmas_pst_preg32_cr_wt_sn_uw_r1_xa", "ws3_n64_s4_p4_tmas_pst_preg32_cr_wt_sn_uw_r1"]


def test_the_prefill_options_outside_the_dispatch_match_fp32(cuda_backend, tmp_path):
    env = {**os.environ, "OUT": str(tmp_path), "PYTHONPATH": str(ROOT / "src"),
           "KS_CHECK_CONFIGS": ",".join(PREFILL_OPTIONS)}
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "attention_gpu.py"), "check-prefill"],
                          capture_output=True, text=True, env=env, timeout=600)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
    from ksearch.kernels.attention.wgmma_ws import parse_config

    for name in PREFILL_OPTIONS:  # each was checked, not filtered out (the check prints the configuration's repr)
        assert f"prefill {parse_config(name)!r} " in proc.stdout, name
    assert " rising: err " in proc.stdout and " stepped: err " in proc.stdout


def _samples():
    out = []
    for fam in attn_t.FAMILIES + dec_t.FAMILIES:
        if "mlx-cuda" in fam.backends:
            params = fam.all_params()
            out += [(fam, fam.default()), (fam, params[len(params) // 2]), (fam, params[-1])]
            # The library decode's configuration (its kernels through a shared-memory ring) as a rendered candidate.
            out += [(fam, p) for p in params if p.get("ring") and p["warps"] == 4 and p["unroll"] == 4
                    and p["target_blocks"] == 1056 and p["min_chunk"] == 512 and p["group_heads"] and p["prefetch"]]
    return out


@pytest.mark.parametrize("fam,params", _samples(), ids=lambda x: getattr(x, "id", str(x)))
def test_cuda_family_renderings_pass_the_harness(cuda_backend, fam, params):
    task = get_task(fam.tasks[0])
    # The naive-like members are slow at long sequences: judge them on the shortest GPU workload.
    workload = min(task.select_workloads("gpu"), key=lambda w: w.axes.get("L", 0) * w.axes["B"])
    result = evaluate(task, fam.source(params), cuda_backend,
                      EvalOptions(workloads=[workload.name], baseline=None, timeout_s=600))
    assert result.status == "passed", result.message


def test_the_decode_familys_tensor_core_choice_passes_the_harness(cuda_backend):
    # `mma`: the library's tensor-core decode beside split-K. B 8, 16k takes it with two splits a pair (partials and
    # the one-read merge), B 16, 32k with one (the block writes the output); B 1 stays on split-K.
    fam = next(f for f in dec_t.FAMILIES if f.id == "gqa_decode.cuda.split_k")
    params = fam.realise("tensor_core_mma", fam.default(), random.Random(0))
    assert params["mma"]
    result = evaluate(get_task("gqa_decode"), fam.source(params), cuda_backend,
                      EvalOptions(workloads=["gpu_b1_len4096", "gpu_b8_len16384", "gpu_b16_len32768"], baseline=None,
                                  timeout_s=600))
    assert result.status == "passed", result.message


def test_the_decode_familys_block_floor_passes_the_harness(cuda_backend):
    # The split-K pattern brings the library's floor of 256 blocks: at B 1, 4k the grouped heads' 8 blocks take 32
    # splits of 128 keys rather than 8 of 512 (the split count and the merge over it differ from the default's).
    fam = next(f for f in dec_t.FAMILIES if f.id == "gqa_decode.cuda.split_k")
    params = fam.realise("split_k_decode_lse_merge", fam.default(), random.Random(0))
    params.update(group_heads=True, min_chunk=512, ring=2, unroll=4)
    assert params["floor_blocks"] == 256
    result = evaluate(get_task("gqa_decode"), fam.source(params), cuda_backend,
                      EvalOptions(workloads=["gpu_b1_len4096"], baseline=None, timeout_s=600))
    assert result.status == "passed", result.message


def test_the_decode_familys_constants_pass_the_harness_with_the_tensor_core_kernel(cuda_backend):
    # `constants` with `mma`: split-K's and the tensor-core kernels' template arguments in headers built at run time,
    # one kernel object per dtype; bf16 (a holdout workload) makes a second set.
    fam = next(f for f in dec_t.FAMILIES if f.id == "gqa_decode.cuda.split_k")
    params = {**fam.realise("split_k_decode_lse_merge", fam.default(), random.Random(0)), "mma": 64}
    params.update(group_heads=True, min_chunk=512, ring=2, unroll=4)
    assert params["constants"] and fam.valid(params)
    result = evaluate(get_task("gqa_decode"), fam.source(params), cuda_backend,
                      EvalOptions(workloads=["gpu_b1_len4096", "gpu_b8_len16384", "gpu_b8_len16384_bf16"],
                                  baseline=None, timeout_s=600))
    assert result.status == "passed", result.message


@pytest.mark.parametrize("family", ["attention.cuda.flash_mma", "attention.cuda.flash_wgmma"])
def test_tensor_core_families_pass_the_holdout_workloads(cuda_backend, family):
    # The H200 search's best (flash_mma) failed its holdout: float32 went to MLX ops, whose matmuls are TF32 on CUDA,
    # against a true fp32 reference. float32 now takes the 3xTF32 kernel (the row kernel where it does not apply).
    task = get_task("attention")
    fam = next(f for f in attn_t.FAMILIES if f.id == family)
    names = [w.name for w in task.holdout_workloads("gpu")]
    assert any("f32" in n for n in names)
    result = evaluate(task, fam.source(fam.default()), cuda_backend,
                      EvalOptions(workloads=names, baseline=None, timeout_s=600))
    assert result.status == "passed", result.message


@pytest.mark.parametrize("copies", ["tma", "bulk"])
def test_the_attention_familys_constants_pass_the_harness(cuda_backend, copies):
    # `constants`: each kernel made at a (dtype, D, mask)'s first call with its template arguments in its header, the
    # scale one array a head dim; the library's D=128 default (tensor copies) and its bulk-copy fallback, over every
    # GPU workload (three dtypes, both head dims, both masks)
    task = get_task("attention")
    fam = next(f for f in attn_t.FAMILIES if f.id == "attention.cuda.flash_wgmma")
    # (bulk copies with one block an item: persistent blocks walk their items with tensor copies only)
    bulk = {"tma": False, "bulk": True, "persist": False, "sections": False, "tail": False} if copies == "bulk" else {}
    params = {**fam.default(), "constants": True, **bulk}
    assert fam.valid(params)
    names = [w.name for w in task.workloads if w.tier == "gpu"]
    result = evaluate(task, fam.source(params), cuda_backend,
                      EvalOptions(workloads=names, baseline=None, timeout_s=600))
    assert result.status == "passed", result.message


def test_tile_images_kernel_equals_the_mlx_reference(cuda_backend):
    import mlx.core as mx

    from ksearch.kernels.attention.wgmma_ws_images import tile_image, tile_images

    for shape, dt in (((2, 3, 136, 64), mx.float16), ((1, 8, 2048, 128), mx.bfloat16)):
        k = mx.random.normal(shape).astype(dt)
        v = mx.random.normal(shape).astype(dt)
        ki, vi = tile_images(k, v)
        assert mx.array_equal(ki, tile_image(k)).item() and mx.array_equal(vi, tile_image(v)).item()
        assert not mx.array_equal(ki, k).item()


def test_the_float32_prefill_and_the_librarys_float32_dispatch_match_fp32(cuda_backend):
    # Every form of the 3xTF32 kernel and the library's `attention` on float32 inputs, with TF32 off for the
    # reference, held to the tasks' fp32 tolerance (benchmarks/prefill_fp32.py check).
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "prefill_fp32.py"), "check"],
                          capture_output=True, text=True, env=env, timeout=400)
    assert proc.returncode == 0 and "fp32: 0 failures" in proc.stdout, (proc.stdout + proc.stderr)[-4000:]
