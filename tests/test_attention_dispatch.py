"""ksearch.kernels.attention and .decode: dispatch and fallback logic on CPU (the kernels themselves run in test_gpu_attention)."""

from __future__ import annotations

import importlib
import math

import mlx.core as mx
import numpy as np
import pytest

from ksearch.kernels import device
from ksearch.kernels.attention import cuda_prefill, mma_sync
from ksearch.kernels.decode import cuda_split_k

# ksearch.kernels exports the functions `attention` and `decode`, which shadow the subpackages' attributes: take the
# packages themselves.
ka = importlib.import_module("ksearch.kernels.attention")
kd = importlib.import_module("ksearch.kernels.decode")


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
    out = kd.decode(q[:, :, :1], kc, vc, 77)
    np.testing.assert_allclose(np.array(out), np.array(_ref(q[:, :, :1], kc[:, :, :77], vc[:, :, :77], False)),
                               atol=1e-4)


def test_plans_name_the_kernel_each_backend_runs(monkeypatch):
    q16 = mx.zeros((1, 4, 1, 64), dtype=mx.float16)
    kc = mx.zeros((1, 2, 512, 64), dtype=mx.float16)
    assert kd.decode_plan(q16, kc, kc, 300)[0] == "native"  # this machine: CPU
    assert ka.prefill_plan(q16, kc, kc)[0] == "native"
    monkeypatch.setattr(device, "backend", lambda: "cuda")
    assert kd.decode_plan(q16, kc, kc, 300)[0] == "split_k"
    monkeypatch.setattr(device, "backend", lambda: "metal")
    monkeypatch.setenv("KSEARCH_METAL_KERNELS", "1")
    assert kd.decode_plan(q16, kc, kc, 300)[0] == "metal_split_k"
    q = mx.zeros((1, 4, 64, 64), dtype=mx.float16)
    assert ka.prefill_plan(q, kc, kc)[0] == "metal_simdgroup"
    assert ka.prefill_plan(q.astype(mx.float32), kc.astype(mx.float32), kc.astype(mx.float32))[0] == "metal_simdgroup"
    assert ka.prefill_plan(q.astype(mx.bfloat16), kc.astype(mx.bfloat16), kc.astype(mx.bfloat16))[0] == "metal_rows"
    monkeypatch.setenv("KSEARCH_METAL_KERNELS", "0")
    assert ka.prefill_plan(q, kc, kc)[0] == "native"


def test_metal_kernels_are_opt_in(monkeypatch):
    monkeypatch.delenv("KSEARCH_METAL_KERNELS", raising=False)
    assert not device.metal_enabled()
    assert device.metal_enabled(True)
    monkeypatch.setenv("KSEARCH_METAL_KERNELS", "1")
    assert device.metal_enabled() and not device.metal_enabled(False)
    monkeypatch.setenv("KSEARCH_METAL_KERNELS", "0")
    assert not device.metal_enabled()
    monkeypatch.setenv("KSEARCH_METAL_KERNELS", "false")
    assert not device.metal_enabled()


@pytest.mark.parametrize("var", ["KSEARCH_METAL_KERNELS", "KSEARCH_MAMBA_FUSED"])
def test_a_kernel_switch_that_is_not_on_or_off_is_refused(monkeypatch, var):
    # A typo must not switch opt-in kernels on (any value but "" and "0" once did).
    import importlib

    from ksearch.errors import ConfigError

    scan = importlib.import_module("ksearch.kernels.selective_scan")  # the package, not the function it exports
    monkeypatch.setenv(var, "maybe")
    read = device.metal_enabled if var == "KSEARCH_METAL_KERNELS" else scan.fused_layout
    with pytest.raises(ConfigError, match=f"{var}='maybe' is not on or off"):
        read()
    assert read(False) is False


def test_the_reason_the_librarys_kernels_do_not_run_names_what_to_do(monkeypatch):
    # where kernels_absent says None, the plans above name one of the library's kernels; elsewhere native
    monkeypatch.delenv("KSEARCH_METAL_KERNELS", raising=False)
    monkeypatch.setattr(device, "backend", lambda: "cuda")
    assert device.kernels_absent() is None
    monkeypatch.setattr(device, "backend", lambda: "metal")
    assert "KSEARCH_METAL_KERNELS=1" in device.kernels_absent()
    assert device.kernels_absent(use_metal=True) is None
    monkeypatch.setenv("KSEARCH_METAL_KERNELS", "1")
    assert device.kernels_absent() is None
    monkeypatch.setattr(device, "backend", lambda: "cpu")
    assert "NVIDIA GPU" in device.kernels_absent()


def test_backend_is_cpu_here():
    with mx.stream(mx.cpu):
        assert device.backend() == "cpu"


@pytest.mark.parametrize("blocks,length,d", [(8, 4096, 128), (128, 4000, 128), (8, 37, 64), (512, 32768, 128),
                                             (32, 1, 128)])
def test_decode_plan_covers_the_length_with_whole_steps(blocks, length, d):
    cfg = cuda_split_k.DecodeConfig()
    nsplit, chunk = cuda_split_k.plan(blocks, length, d, cfg)
    assert chunk % cfg.keys_per_step(d) == 0
    assert nsplit * chunk >= length > (nsplit - 1) * chunk
    assert blocks * nsplit <= max(blocks, cfg.target_blocks) + blocks


@pytest.mark.parametrize("blocks,length,floored", [(8, 4096, (32, 128)), (8, 8192, (32, 256)), (8, 16384, (32, 512)),
                                                    (64, 4096, (8, 512)), (8, 1000, (8, 128)), (8, 64, (1, 128))])
def test_the_block_floor_shortens_splits_where_min_chunk_leaves_few_blocks(blocks, length, floored):
    # B 1, 4k at G 4: 8 blocks; 512-key chunks would make 64 blocks in all, the floor asks for 256 (32 splits), and
    # never cuts a split below FLOOR_MIN_KEYS. Where min_chunk already gives 256 blocks nothing changes.
    cfg = cuda_split_k.DecodeConfig()
    assert cuda_split_k.plan(blocks, length, 128, cfg) == floored
    plain = cuda_split_k.plan(blocks, length, 128, cuda_split_k.DecodeConfig(floor_blocks=0))
    assert plain[1] == max(cfg.min_chunk, -(-length // (cfg.target_blocks // blocks)))
    assert floored[1] <= plain[1] and floored[1] >= min(plain[1], cuda_split_k.FLOOR_MIN_KEYS)


def test_supports_rejects_what_the_kernels_do_not_take():
    cfg = mma_sync.PrefillConfig()
    f16 = mx.float16
    q = mx.zeros((1, 32, 4096, 128), dtype=f16)
    k = mx.zeros((1, 8, 4096, 128), dtype=f16)
    assert mma_sync.supports(q, k, k, True, cfg)
    assert not mma_sync.supports(q.astype(mx.float32), k.astype(mx.float32), k.astype(mx.float32), False, cfg)
    assert not mma_sync.supports(mx.zeros((1, 32, 100, 128), dtype=f16), k, k, False, cfg)
    assert not mma_sync.supports(mx.zeros((1, 32, 4096, 96), dtype=f16), mx.zeros((1, 8, 4096, 96), f16),
                                       mx.zeros((1, 8, 4096, 96), f16), False, cfg)
    kc = mx.zeros((2, 8, 1024, 128), dtype=f16)
    qd = mx.zeros((2, 32, 1, 128), dtype=f16)
    assert cuda_split_k.supports(qd, kc, 1000)
    assert not cuda_split_k.supports(qd, kc, 2000)
    assert not cuda_split_k.supports(qd.astype(mx.float32), kc.astype(mx.float32), 10)
    assert not cuda_split_k.supports(mx.zeros((2, 32, 2, 128), dtype=f16), kc, 10)


def test_shared_memory_of_every_prefill_config_fits():
    for bm, bn, db in ((64, 64, True), (128, 64, True), (64, 32, False), (128, 32, True)):
        assert mma_sync.PrefillConfig(bm, bn, db).smem_bytes(128) <= cuda_prefill.MAX_SMEM


def test_softmax_scale_is_made_once_per_head_dim():
    s128 = cuda_prefill.softmax_scale(128)
    assert cuda_prefill.softmax_scale(128) is s128  # no new array (allocation and copy) per call
    assert s128.dtype == mx.float32 and s128.shape == (1,)
    assert abs(s128.item() - 128 ** -0.5) < 1e-7 and abs(cuda_prefill.softmax_scale(64).item() - 0.125) < 1e-7


@pytest.fixture
def fresh_launches():
    """Launches are kept per shapes and configuration: these tests start and end without any."""
    caches = (cuda_split_k._launch, cuda_split_k._checked_launch, cuda_split_k.default_launch, kd._cuda_route,
              kd._mma_fits)
    for cached in caches:
        cached.cache_clear()
    yield
    for cached in caches:
        cached.cache_clear()


@pytest.mark.parametrize("hopper", [True, False])
def test_decode_takes_the_kernel_decode_plan_names_at_every_length(monkeypatch, fresh_launches, hopper):
    """decode() decides from one cached route a call (the tensor-core kernel past MMA_MIN_KV_BYTES on Hopper, split-K
    below it): the same kernel decode_plan names, on either side of every threshold; a length outside the cache is
    refused by both before anything runs."""
    from ksearch.kernels.decode import cuda_cluster

    monkeypatch.setattr(device, "backend", lambda: "cuda")
    monkeypatch.setattr(device, "hopper", lambda: hopper)
    ran: list[str] = []
    monkeypatch.setattr(cuda_cluster, "decode_parts_with", lambda *a: ran.append("mma_split") or a[1])
    monkeypatch.setattr(cuda_cluster, "decode_cluster", lambda *a: ran.append("mma_split") or a[0])
    monkeypatch.setattr(cuda_split_k, "decode_with", lambda *a: ran.append("split_k") or a[1])
    monkeypatch.setattr(kd, "native_decode", lambda *a: ran.append("native") or a[0])
    monkeypatch.setattr(cuda_cluster, "_parts_kernel", lambda *a: None)
    monkeypatch.setattr(cuda_cluster, "_kernel", lambda *a: None)
    f16 = mx.float16
    q = mx.zeros((1, 32, 1, 128), dtype=f16)
    kc = mx.zeros((1, 8, 40000, 128), dtype=f16)
    per_key = 2 * 8 * 128 * 2  # bytes of K and V a position at B 1
    edge = kd.MMA_MIN_KV_BYTES // per_key
    for length in (1, 4096, edge, edge + 1, 33000, 40000):
        ran.clear()
        kd.decode(q, kc, kc, length)
        kd.decode_plan(q, kc, kc, length)[1]()
        assert ran[0] == ran[1], (length, ran)
        want = "mma_split" if hopper and length > edge else "split_k"
        assert ran[0] == want, (length, ran)
    ran.clear()
    for length in (-1, 0, 40001):
        for call in (kd.decode, kd.decode_plan):
            with pytest.raises(ValueError, match=r"length must lie in 1\.\.40000"):
                call(q, kc, kc, length)
    assert not ran
    cuda_cluster.parts_launch.cache_clear()


def test_a_launch_splits_as_plan_does_and_refuses_what_the_kernel_does_not_take(fresh_launches):
    f16 = mx.float16
    kc = mx.zeros((2, 8, 1024, 128), dtype=f16)
    qd = mx.zeros((2, 32, 1, 128), dtype=f16)
    for cfg in (cuda_split_k.DecodeConfig(), cuda_split_k.DecodeConfig(min_chunk=128, target_blocks=528, warps=2),
                cuda_split_k.DecodeConfig(floor_blocks=0), cuda_split_k.DecodeConfig(floor_blocks=1024)):
        launch = cuda_split_k.launch_for(qd, kc, kc, cfg)
        assert launch is not None and launch.blocks == 16 and launch.g == 4
        for length in (1, 37, 511, 512, 513, 1000, 1024, 4096, 32768):
            assert launch.nsplit(length) == cuda_split_k.plan(16, length, 128, cfg)[0]
    cfg = cuda_split_k.DEFAULT
    assert cuda_split_k.launch_for(qd.astype(mx.float32), kc.astype(mx.float32), kc.astype(mx.float32), cfg) is None
    assert cuda_split_k.launch_for(qd, kc.astype(mx.bfloat16), kc.astype(mx.bfloat16), cfg) is None
    assert cuda_split_k.launch_for(qd, kc, mx.zeros((2, 8, 1000, 128), dtype=f16), cfg) is None
    assert cuda_split_k.launch_for(mx.zeros((2, 32, 2, 128), dtype=f16), kc, kc, cfg) is None
    assert cuda_split_k.launch_for(mx.zeros((2, 36, 1, 128), dtype=f16), kc, kc, cfg) is None  # 36 % 8
    assert cuda_split_k.launch_for(mx.zeros((2, 32, 1, 128), dtype=f16), kc[:, :2], kc[:, :2], cfg) is None  # G 16


def test_a_ring_that_does_not_fit_in_shared_memory_is_refused_before_anything_runs(fresh_launches):
    f16 = mx.float16
    kc = mx.zeros((1, 8, 1024, 128), dtype=f16)
    q4 = mx.zeros((1, 32, 1, 128), dtype=f16)
    q8 = mx.zeros((1, 64, 1, 128), dtype=f16)
    ring = cuda_split_k.DecodeConfig(ring=4, unroll=2)
    launch = cuda_split_k.launch_for(q4, kc, kc, ring)
    assert launch is not None and ("RING", 4) in launch.template
    assert ("RING", 4) not in cuda_split_k.launch_for(q4, kc, kc, cuda_split_k.DEFAULT).template
    with pytest.raises(ValueError, match="49408 bytes of shared memory a block at G 8, D 128"):
        cuda_split_k.launch_for(q8, kc, kc, ring)  # the warps' merge grows with G
    with pytest.raises(ValueError, match="not made for the fused kernel"):
        cuda_split_k.launch_for(q4, kc, kc, cuda_split_k.DecodeConfig(ring=3, unroll=2, fused=True))
    with pytest.raises(ValueError, match="2 steps at least"):
        cuda_split_k.launch_for(q4, kc, kc, cuda_split_k.DecodeConfig(ring=1))


def test_the_library_takes_its_ring_where_it_fits_and_the_registers_where_it_does_not(monkeypatch, fresh_launches):
    f16 = mx.float16
    kc = mx.zeros((1, 8, 1024, 128), dtype=f16)
    q4, q8 = mx.zeros((1, 32, 1, 128), dtype=f16), mx.zeros((1, 64, 1, 128), dtype=f16)
    assert kd.decode_config(q4, kc, 1000) == cuda_split_k.DEFAULT and cuda_split_k.DEFAULT.ring == 2
    assert cuda_split_k.DEFAULT.shared_bytes(4, 128) <= cuda_split_k.MAX_STATIC_SHARED
    # G 8 at D 128: the ring and the warps' merge need more than MLX's 48 KB, so the same steps in registers.
    assert cuda_split_k.DEFAULT.shared_bytes(8, 128) > cuda_split_k.MAX_STATIC_SHARED
    assert kd.decode_config(q8, kc, 1000) == cuda_split_k.PLAIN and cuda_split_k.PLAIN.ring == 0
    monkeypatch.setattr(device, "backend", lambda: "cuda")
    for q, ring in ((q4, ("RING", 2)), (q8, None)):
        name, _ = kd.decode_plan(q, kc, kc, 1000)
        launch = cuda_split_k.launch_for(q, kc, kc, kd.decode_config(q, kc, 1000))
        assert name == "split_k" and launch is not None
        assert (ring in launch.template) if ring else not any(k == "RING" for k, _ in launch.template)
    fused = cuda_split_k.launch_for(q4, kc, kc, cuda_split_k.DecodeConfig(fused=True))
    assert fused is not None
    with pytest.raises(ValueError, match="no partials"):
        cuda_split_k.split_partials(fused, q4, kc, kc, 1000)


def test_a_split_k_call_passes_one_view_and_v_whole(monkeypatch, fresh_launches):
    """A call's host work counts in full at small batch: the split kernel gets K as the only view (its shape carries
    the length) and V whole, and the merge gets the split's partials; nothing else is built."""
    calls = []

    def kernel(name):
        def call(*, inputs, output_shapes, output_dtypes, **launch):
            calls.append((name, inputs, output_shapes, launch))
            return [mx.zeros(s, dtype=t) for s, t in zip(output_shapes, output_dtypes, strict=True)]
        return call

    monkeypatch.setattr(device, "backend", lambda: "cuda")
    monkeypatch.setattr(cuda_split_k, "_kernels", lambda cfg, constants: (kernel("split"), kernel("merge")))
    f16 = mx.float16
    q = mx.zeros((2, 32, 1, 128), dtype=f16)
    kc, vc = mx.zeros((2, 8, 5000, 128), dtype=f16), mx.zeros((2, 8, 5000, 128), dtype=f16)
    name, run = kd.decode_plan(q, kc, vc, 4321)
    assert name == "split_k"
    out = run()
    (split_name, split_in, split_shapes, split_launch), (merge_name, merge_in, _, merge_launch) = calls
    assert (split_name, merge_name) == ("split", "merge") and out.shape == q.shape
    assert split_in[0] is q and split_in[2] is vc and split_in[1].shape == (2, 8, 4321, 128)
    nsplit = cuda_split_k.plan(16, 4321, 128, cuda_split_k.DEFAULT)[0]
    assert split_shapes == [(16, nsplit, 4, 128), (16, nsplit, 4, 2)]
    assert split_launch["grid"] == (16 * 128, nsplit, 1) and merge_launch["grid"] == (2 * 32 * 128, 1, 1)
    # The kernels' template arguments are in their text, not formatted by MLX into every call.
    assert "template" not in split_launch and "template" not in merge_launch


def test_a_configuration_reads_as_split_k_fields_or_the_tensor_core_kernel():
    from ksearch.kernels.decode.cuda_cluster import ClusterConfig

    assert kd.parse_config("ring=0,unroll=2") == cuda_split_k.DecodeConfig(ring=0, unroll=2)
    assert kd.parse_config("mma") == ClusterConfig(cluster=False)
    assert kd.parse_config("mma:consumers=4,producers=2") == ClusterConfig(consumers=4, producers=2, cluster=False)
    with pytest.raises(ValueError, match="nope"):
        kd.parse_config("nope=1")
    with pytest.raises(ValueError, match="nope"):
        kd.parse_config("mma:nope=1")


def test_float32_on_cuda_takes_the_3xtf32_kernel_where_it_was_measured_ahead(monkeypatch):
    monkeypatch.setattr(device, "backend", lambda: "cuda")
    monkeypatch.setattr(ka, "wgmma_enabled", lambda: False)
    monkeypatch.delenv("MLX_ENABLE_TF32", raising=False)
    n = ka.F32_KERNEL_FROM

    def plan(length, s, d, causal, dtype=mx.float32, **kw):
        q, k = mx.zeros((1, 8, length, d), dtype=dtype), mx.zeros((1, 2, s, d), dtype=dtype)
        return ka.prefill_plan(q, k, k, causal, **kw)[0]

    # TF32 on (MLX's default): MLX's float32 attention, TF32-accurate, was ahead at D=128 without the mask
    assert plan(n, n, 128, False) == "native"
    assert plan(n, n, 128, True) == "mma_tf32x3_m128_n32_fl"
    assert plan(n, n, 64, False) == "mma_tf32x3_m64_n32_qr_fl"
    assert plan(n, 2 * n, 64, True) == "mma_tf32x3_m64_n32_qr_fl"
    # TF32 off: MLX's at fp32's accuracy was behind at every shape measured
    monkeypatch.setenv("MLX_ENABLE_TF32", "0")
    assert plan(n, n, 128, False) == "mma_tf32x3_m128_n32_fl"
    # not measured below F32_KERNEL_FROM; does not fit: D 96
    for other in ((n - 1, n, 64, False), (n, n - 1, 64, False), (n, n, 96, True)):
        assert plan(*other) == "native"
    # a kernel named outright is that kernel or MLX's; float16 keeps its kernels
    assert plan(n, n, 128, True, config=mma_sync.PrefillConfig(bm=128, bn=64, db=True)) == "native"
    assert plan(n, n, 128, True, dtype=mx.float16) == "mma_sync_m128_n64_db"
    monkeypatch.setenv("MLX_ENABLE_TF32", " 1")
    assert plan(n, n, 128, False) == "native"


def _qkv(q_shape=(2, 8, 16, 64), kv_shape=(2, 2, 16, 64), dtype=mx.float32):
    mx.random.seed(1)
    q = mx.random.normal(q_shape).astype(dtype)
    k, v = (mx.random.normal(kv_shape).astype(dtype) for _ in range(2))
    return q, k, v


def _transposed(a):
    """The same values as a view whose last two axes are strided, not row-contiguous."""
    return mx.contiguous(a.swapaxes(2, 3)).swapaxes(2, 3)


@pytest.mark.parametrize(("q_shape", "kv_shape", "causal"), [
    ((1, 4, 1, 16), (1, 2, 9, 16), True),  # one query row
    ((1, 4, 5, 16), (1, 2, 1, 16), False),  # one key
    ((1, 3, 5, 3), (1, 1, 7, 3), True),  # odd head dim and heads, L < S with the mask
    ((3, 2, 6, 8), (3, 2, 6, 8), True),  # no grouping, L = S
])
def test_attention_matches_mlx_on_odd_but_valid_shapes_and_strided_views(q_shape, kv_shape, causal):
    q, k, v = _qkv(q_shape, kv_shape)
    want = np.array(_ref(q, k, v, causal))
    for args in ((q, k, v), (_transposed(q), _transposed(k), _transposed(v))):
        np.testing.assert_allclose(np.array(ka.attention(*args, causal)), want, atol=1e-5)
    out = ka.attention(*(x.astype(mx.bfloat16) for x in (q, k, v)), causal=int(causal))  # 0 / 1 read as a flag
    assert out.dtype == mx.bfloat16 and out.shape == q.shape


def test_decode_matches_mlx_at_every_valid_length_and_length_type():
    q, kc, vc = _qkv((2, 4, 1, 16), (2, 2, 9, 16))
    for length in (1, 5, 9, np.int64(9), mx.array(9)):
        n = int(length)
        want = np.array(_ref(q, kc[:, :, :n], vc[:, :, :n], False))
        np.testing.assert_allclose(np.array(kd.decode(q, kc, vc, length)), want, atol=1e-5)
        np.testing.assert_allclose(np.array(kd.decode(q, _transposed(kc), vc, length)), want, atol=1e-5)


@pytest.mark.parametrize(("q_shape", "kv_shape"), [((0, 4, 5, 8), (0, 2, 5, 8)), ((1, 0, 5, 8), (1, 2, 5, 8)),
                                                   ((1, 4, 0, 8), (1, 2, 5, 8)), ((1, 4, 0, 8), (1, 2, 0, 8))])
def test_an_empty_output_is_an_empty_array_on_every_backend(monkeypatch, q_shape, kv_shape):
    """B, Hq or L of 0: q's shape, no kernel launched (MLX 0.32's own attention fails at Hq = 0)."""
    q, k, v = _qkv(q_shape, kv_shape, mx.float16)
    for backend in ("cpu", "cuda"):
        monkeypatch.setattr(device, "backend", lambda backend=backend: backend)
        for causal in (False, True):
            assert ka.attention(q, k, v, causal).shape == q_shape
    q1, kc = _qkv(q_shape[:2] + (1, 8), kv_shape[:2] + (5, 8), mx.float16)[:2]
    if q_shape[2]:  # a decode step has one query row: its empty outputs are B or Hq of 0
        for backend in ("cpu", "cuda"):
            monkeypatch.setattr(device, "backend", lambda backend=backend: backend)
            assert kd.decode(q1, kc, kc, 3).shape == q1.shape
            assert kd.decode_plan(q1, kc, kc, 3)[1]().shape == q1.shape


ATTENTION_REFUSALS = [
    # (what is wrong, the call's arguments from q, k, v, the exception, what the message says)
    ("q rank 3", lambda q, k, v: (q[0], k, v), ValueError, r"q must be 4-d, \(B, Hq, L, D\); got shape \(8, 16, 64\)"),
    ("k batch", lambda q, k, v: (q, k[:1], v[:1]), ValueError, r"k's B is 1 where q's is 2"),
    ("q batch of 1", lambda q, k, v: (q[:1], k, v), ValueError, r"k's B is 2 where q's is 1"),
    ("k head dim", lambda q, k, v: (q, k[..., :32], v[..., :32]), ValueError, r"k's D is 32 where q's is 64"),
    ("v head dim", lambda q, k, v: (q, k, v[..., :32]), ValueError, r"v's D is 32 where q's is 64"),
    ("v length", lambda q, k, v: (q, k, v[:, :, :8]), ValueError, r"v's S is 8 where k's is 16"),
    ("v heads", lambda q, k, v: (q, k, v[:, :1]), ValueError, r"v's Hkv is 1 where k's is 2"),
    ("heads", lambda q, k, v: (q[:, :5], k, v), ValueError, r"Hq = 5 heads must be a multiple of k and v's Hkv = 2"),
    ("no K / V heads", lambda q, k, v: (q, k[:, :0], v[:, :0]), ValueError, r"multiple of k and v's Hkv = 0"),
    ("head dim 0", lambda q, k, v: (q[..., :0], k[..., :0], v[..., :0]), ValueError, r"head dim D is 0"),
    ("no keys", lambda q, k, v: (q, k[:, :, :0], v[:, :, :0]), ValueError, r"no keys \(S = 0\)"),
    ("int32", lambda q, k, v: (q.astype(mx.int32), k, v), TypeError, r"q has dtype int32; pass float16"),
    ("mixed", lambda q, k, v: (q.astype(mx.float16), k, v), TypeError, r"q, k and v must share one dtype"),
    ("numpy", lambda q, k, v: (np.array(q), k, v), TypeError, r"q must be an mx.array; got a numpy.ndarray"),
    ("float64 numpy", lambda q, k, v: (q, k, np.array(v, np.float64)), TypeError, r"v must be an mx.array"),
    ("list", lambda q, k, v: (q, k.tolist(), v), TypeError, r"k must be an mx.array; got list"),
]


@pytest.mark.parametrize(("call", "error", "message"), [r[1:] for r in ATTENTION_REFUSALS],
                         ids=[r[0] for r in ATTENTION_REFUSALS])
@pytest.mark.parametrize("backend", ["cpu", "cuda"])
def test_attention_refuses_what_it_cannot_take_naming_the_argument(monkeypatch, fresh_launches, backend, call, error,
                                                                   message):
    """One TypeError / ValueError from the library's checks on every backend (on CUDA before any kernel is chosen:
    the kernels read the shapes they are given), never MLX's broadcast errors or its crash at Hkv = 0."""
    monkeypatch.setattr(device, "backend", lambda: backend)
    q, k, v = _qkv()
    for plan in (ka.attention, lambda *a: ka.prefill_plan(*a)[1]()):
        with pytest.raises(error, match="^attention: .*" + message):
            plan(*call(q, k, v))


@pytest.mark.parametrize(("kwargs", "error", "message"), [
    ({"causal": "causal"}, TypeError, r"causal must be True or False; got str 'causal'"),
    ({"causal": None}, TypeError, r"causal must be True or False; got None"),
    ({"causal": mx.zeros((16, 16))}, TypeError, r"causal must be True or False; got a mlx.core.array of shape \(16, 16\) .*takes no mask array"),
    ({"causal": True, "use_metal": "no"}, TypeError, r"use_metal must be True or False; got str 'no'"),
    ({"config": "ws3_n64_s4"}, TypeError, r"config must be None or one of PrefillConfig, .*parse_prefill_config"),
    ({"config": {"bm": 64}}, TypeError, r"config must be None or one of"),
    ({"config": kd.DecodeConfig()}, TypeError, r"config must be None or one of .*got .*DecodeConfig"),
])
def test_attention_refuses_options_of_the_wrong_type(monkeypatch, fresh_launches, kwargs, error, message):
    """A string or an array as `causal` is truthy: unchecked, it turns the mask on; a config of the wrong kind would
    be ignored (on CUDA, a dict fails inside the plan's cache)."""
    q, k, v = _qkv()
    for backend in ("cpu", "cuda"):
        monkeypatch.setattr(device, "backend", lambda backend=backend: backend)
        with pytest.raises(error, match="^attention: " + message):
            ka.attention(q, k, v, **kwargs)


def test_attention_refuses_a_causal_mask_that_leaves_query_rows_without_keys():
    """With the mask aligned lower right and L > S, the first L - S rows see no key: MLX's attention gives them the
    mean of V."""
    q, k, v = _qkv((1, 2, 6, 8), (1, 2, 4, 8))
    assert ka.attention(q, k, v).shape == q.shape  # without the mask every row sees every key
    with pytest.raises(ValueError, match=r"^attention: causal=True with L = 6 queries and S = 4 keys.*pass S >= L"):
        ka.attention(q, k, v, causal=True)


DECODE_REFUSALS = [
    ("q with two rows", lambda q, k, v: (q[:, :, [0, 0]], k, v, 5), ValueError,
     r"q must be \(B, Hq, 1, D\); got shape \(2, 8, 2, 64\) \(one query position a step"),
    ("q rank 3", lambda q, k, v: (q[:, :, 0], k, v, 5), ValueError, r"q must be 4-d"),
    ("heads", lambda q, k, v: (q[:, :5], k, v, 5), ValueError, r"Hq = 5 heads must be a multiple"),
    ("cache batch", lambda q, k, v: (q, k[:1], v[:1], 5), ValueError, r"k_cache's B is 1 where q's is 2"),
    ("caches differ", lambda q, k, v: (q, k, v[:, :, :16], 5), ValueError, r"v_cache's capacity is 16 where k_cache"),
    ("mixed", lambda q, k, v: (q, k, v.astype(mx.float32), 5), TypeError, r"must share one dtype"),
    ("int32", lambda q, k, v: (q.astype(mx.int32), k, v, 5), TypeError, r"q has dtype int32"),
    ("numpy", lambda q, k, v: (q, np.array(k), v, 5), TypeError, r"k_cache must be an mx.array"),
    ("length past the cache", lambda q, k, v: (q, k, v, 33), ValueError, r"length must lie in 1\.\.32 .*got 33"),
    ("length 0", lambda q, k, v: (q, k, v, 0), ValueError, r"length must lie in 1\.\.32"),
    ("negative length", lambda q, k, v: (q, k, v, -3), ValueError, r"length must lie in 1\.\.32 .*got -3"),
    ("float length", lambda q, k, v: (q, k, v, 3.7), TypeError, r"length must be an int.*got float 3.7"),
    ("str length", lambda q, k, v: (q, k, v, "3"), TypeError, r"length must be an int.*got str '3'"),
    ("bool length", lambda q, k, v: (q, k, v, True), TypeError, r"length must be an int; got bool True"),
    ("length None", lambda q, k, v: (q, k, v, None), TypeError, r"length must be an int.*got None"),
    ("empty caches", lambda q, k, v: (q, k[:, :, :0], v[:, :, :0], 0), ValueError, r"caches hold no position"),
]


@pytest.mark.parametrize(("call", "error", "message"), [r[1:] for r in DECODE_REFUSALS],
                         ids=[r[0] for r in DECODE_REFUSALS])
@pytest.mark.parametrize("backend", ["cpu", "cuda"])
def test_decode_refuses_what_it_cannot_take_naming_the_argument(monkeypatch, fresh_launches, backend, call, error,
                                                                message):
    """Unchecked, a length past the cache reads only the cache (native) and a negative one counts from its end; a
    v_cache of another dtype goes to split-K on CUDA, which reads it as q's."""
    monkeypatch.setattr(device, "backend", lambda: backend)
    q, kc, vc = _qkv((2, 8, 1, 64), (2, 2, 32, 64), mx.float16)
    for plan in (kd.decode, lambda *a: kd.decode_plan(*a)[1]()):
        with pytest.raises(error, match="^decode: .*" + message):
            plan(*call(q, kc, vc))


def test_decode_refuses_options_of_the_wrong_type():
    q, kc, vc = _qkv((2, 8, 1, 64), (2, 2, 32, 64), mx.float16)
    with pytest.raises(TypeError, match=r"^decode: config must be None or one of DecodeConfig, .*parse_config"):
        kd.decode(q, kc, vc, 5, config="ring=2")
    with pytest.raises(TypeError, match=r"^decode: config must be .*got .*MetalConfig"):
        kd.decode(q, kc, vc, 5, config=ka.MetalConfig("metal_rows"))
    with pytest.raises(TypeError, match=r"^decode: use_metal must be True or False"):
        kd.decode(q, kc, vc, 5, use_metal="yes")


def test_the_checks_are_made_once_per_shapes():
    """A decode loop pays a cache lookup a call for them, not the checks: the same shapes hit the cache."""
    from ksearch.kernels import arguments

    q, kc, vc = _qkv((1, 8, 1, 64), (1, 2, 32, 64), mx.float16)
    kd.decode(q, kc, vc, 3)
    hits = arguments.decode_shapes.cache_info().hits
    for length in range(4, 20):
        kd.decode(q, kc, vc, length)
    assert arguments.decode_shapes.cache_info().hits == hits + 16
