"""ksearch.kernels.attention: dispatch and fallback logic on CPU (the kernels themselves run in test_gpu_attention)."""

from __future__ import annotations

import importlib
import math
import time

import mlx.core as mx
import numpy as np
import pytest

from ksearch.kernels import attention_cuda, decode_cuda

# ksearch.kernels exports the function `attention`, which shadows the submodule's attribute: take the module itself.
ka = importlib.import_module("ksearch.kernels.attention")


def _ref(q, k, v, causal):
    g = q.shape[1] // k.shape[1]
    k, v = (mx.repeat(x.astype(mx.float32), g, axis=1) for x in (k, v))
    s = (q.astype(mx.float32) @ k.transpose(0, 1, 3, 2)) / math.sqrt(q.shape[-1])
    if causal:
        n, m = q.shape[2], k.shape[2]
        s = mx.where(mx.arange(m)[None] <= mx.arange(n)[:, None] + (m - n), s, -mx.inf)
    return mx.softmax(s, axis=-1) @ v


def test_cpu_falls_back_to_native_and_is_correct():
    mx.random.seed(0)
    q = mx.random.normal((1, 4, 64, 32))
    k = mx.random.normal((1, 2, 96, 32))
    v = mx.random.normal((1, 2, 96, 32))
    for causal in (False, True):
        out = ka.attention(q, k, v, causal)
        np.testing.assert_allclose(np.array(out), np.array(_ref(q, k, v, causal)), atol=1e-4)
    kc = mx.random.normal((1, 2, 128, 32))
    vc = mx.random.normal((1, 2, 128, 32))
    out = ka.decode(q[:, :, :1], kc, vc, 77)
    np.testing.assert_allclose(np.array(out), np.array(_ref(q[:, :, :1], kc[:, :, :77], vc[:, :, :77], False)),
                               atol=1e-4)


def test_plans_name_the_kernel_each_backend_runs(monkeypatch):
    q16 = mx.zeros((1, 4, 1, 64), dtype=mx.float16)
    kc = mx.zeros((1, 2, 512, 64), dtype=mx.float16)
    assert ka.decode_plan(q16, kc, kc, 300)[0] == "native"  # this machine: CPU
    assert ka.prefill_plan(q16, kc, kc)[0] == "native"
    monkeypatch.setattr(ka, "_backend", lambda: "cuda")
    assert ka.decode_plan(q16, kc, kc, 300)[0] == "split_k"
    monkeypatch.setattr(ka, "_backend", lambda: "metal")
    monkeypatch.setenv("KSEARCH_METAL_KERNELS", "1")
    assert ka.decode_plan(q16, kc, kc, 300)[0] == "metal_split_k"
    q = mx.zeros((1, 4, 64, 64), dtype=mx.float16)
    assert ka.prefill_plan(q, kc, kc)[0] == "metal_simdgroup"
    assert ka.prefill_plan(q.astype(mx.float32), kc.astype(mx.float32), kc.astype(mx.float32))[0] == "metal_rows"
    monkeypatch.setenv("KSEARCH_METAL_KERNELS", "0")
    assert ka.prefill_plan(q, kc, kc)[0] == "native"


def test_metal_kernels_are_opt_in(monkeypatch):
    monkeypatch.delenv("KSEARCH_METAL_KERNELS", raising=False)
    assert not ka.metal_enabled()
    assert ka.metal_enabled(True)
    monkeypatch.setenv("KSEARCH_METAL_KERNELS", "1")
    assert ka.metal_enabled() and not ka.metal_enabled(False)
    monkeypatch.setenv("KSEARCH_METAL_KERNELS", "0")
    assert not ka.metal_enabled()


def test_backend_is_cpu_here():
    with mx.stream(mx.cpu):
        assert ka._backend() == "cpu"


@pytest.mark.parametrize("blocks,length,d", [(8, 4096, 128), (128, 4000, 128), (8, 37, 64), (512, 32768, 128),
                                             (32, 1, 128)])
def test_decode_plan_covers_the_length_with_whole_steps(blocks, length, d):
    cfg = decode_cuda.DecodeConfig()
    nsplit, chunk = decode_cuda.plan(blocks, length, d, cfg)
    assert chunk % cfg.keys_per_step(d) == 0
    assert nsplit * chunk >= length > (nsplit - 1) * chunk
    assert blocks * nsplit <= max(blocks, cfg.target_blocks) + blocks


def test_supports_rejects_what_the_kernels_do_not_take():
    cfg = attention_cuda.PrefillConfig()
    f16 = mx.float16
    q = mx.zeros((1, 32, 4096, 128), dtype=f16)
    k = mx.zeros((1, 8, 4096, 128), dtype=f16)
    assert attention_cuda.supports(q, k, k, True, cfg)
    assert not attention_cuda.supports(q.astype(mx.float32), k.astype(mx.float32), k.astype(mx.float32), False, cfg)
    assert not attention_cuda.supports(mx.zeros((1, 32, 100, 128), dtype=f16), k, k, False, cfg)
    assert not attention_cuda.supports(mx.zeros((1, 32, 4096, 96), dtype=f16), mx.zeros((1, 8, 4096, 96), f16),
                                       mx.zeros((1, 8, 4096, 96), f16), False, cfg)
    kc = mx.zeros((2, 8, 1024, 128), dtype=f16)
    qd = mx.zeros((2, 32, 1, 128), dtype=f16)
    assert decode_cuda.supports(qd, kc, 1000)
    assert not decode_cuda.supports(qd, kc, 2000)
    assert not decode_cuda.supports(qd.astype(mx.float32), kc.astype(mx.float32), 10)
    assert not decode_cuda.supports(mx.zeros((2, 32, 2, 128), dtype=f16), kc, 10)


def test_shared_memory_of_every_prefill_config_fits():
    for bm, bn, db in ((64, 64, True), (128, 64, True), (64, 32, False), (128, 32, True)):
        assert attention_cuda.PrefillConfig(bm, bn, db).smem_bytes(128) <= attention_cuda.MAX_SMEM


def test_bench_rounds_grow_to_the_target_length_and_every_function_gets_the_same_count():
    from ksearch.cli.commands import bench_attention as ba

    calls = {"fast": 0, "slow": 0}

    def make(name, seconds):
        def fn():
            calls[name] += 1
            time.sleep(seconds)
            return mx.zeros((1,))
        return fn

    fns = {"fast": make("fast", 0.001), "slow": make("slow", 0.003)}
    times = ba._time_rounds(fns, rounds=2, n=2, warmup=1, round_s=0.02)
    # warm-up 1 + probe 1 + 2 rounds of n each; n from the fastest (~1 ms a call -> ~20, capped at 64)
    n = (calls["fast"] - 2) // 2
    assert 8 <= n <= 21 and calls["slow"] == calls["fast"]
    assert all(len(t) == 2 for t in times.values())
    calls.update(fast=0, slow=0)
    ba._time_rounds(fns, rounds=2, n=2, warmup=1)  # without a target: n as given
    assert calls == {"fast": 5, "slow": 5}  # warm-up 1 + 2 rounds of 2


def test_softmax_scale_is_made_once_per_head_dim():
    s128 = attention_cuda.softmax_scale(128)
    assert attention_cuda.softmax_scale(128) is s128  # no new array (allocation and copy) per call
    assert s128.dtype == mx.float32 and s128.shape == (1,)
    assert abs(s128.item() - 128 ** -0.5) < 1e-7 and abs(attention_cuda.softmax_scale(64).item() - 0.125) < 1e-7
