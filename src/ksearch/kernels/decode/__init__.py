"""One GQA decode step as a plain function, `decode`: the dispatch over the decode kernels of this package.

q (B, Hq, 1, D) against positions [0, length) of K / V caches (B, Hkv, capacity, D). On CUDA the split-K kernel
(cuda_split_k.py), and on Hopper above 64 MiB of K / V at D=128 the tensor-core kernel of
cuda_cluster.py (`mma_takes`; its other configurations on request); on Metal, when opted in
(`KSEARCH_METAL_KERNELS=1` or `use_metal=True`), the split-K kernel of metal_split_k.py (its knobs through a
MetalDecodeConfig); MLX's own
`mx.fast.scaled_dot_product_attention` wherever no kernel of ours fits.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from ksearch.kernels import arguments, device
from ksearch.kernels.decode import cuda_cluster, cuda_split_k, metal_split_k
from ksearch.kernels.decode.cuda_cluster import ClusterConfig
from ksearch.kernels.decode.cuda_split_k import DecodeConfig
from ksearch.kernels.decode.metal_split_k import MetalDecodeConfig

#: A configuration `decode` takes: split-K's or the tensor-core kernel's on CUDA, the Metal kernel's on a Mac; one
#: for another backend's kernel runs MLX's attention.
AnyConfig = DecodeConfig | ClusterConfig | MetalDecodeConfig
CONFIG_TYPES = (DecodeConfig, ClusterConfig, MetalDecodeConfig)


def decode_config(q: Any, k_cache: Any, length: int) -> DecodeConfig:
    """The library's configuration: the sweep's best on the H200 over B 1/8/16 x 4k/16k/32k
    (benchmarks/results/decode-config-sweep-*.json), with 512-key chunks at least and the steps' rows through a
    shared-memory ring where it fits (decode-versus-native-queued-*.json). Kept per (G, D): a call's Python work
    counts at B 1."""
    return cuda_split_k.default_for(q.shape[1] // k_cache.shape[1], q.shape[-1])


#: The tensor-core kernel (one block a (batch, kv head) and split, no producer warp, no clusters) takes the library's
#: calls of more than MMA_MIN_KV_BYTES of K and V at D=128, where it measured ahead of split-K side by side in chained
#: calls (each call's query the previous call's output, as `bench decode` times them): at G 4 ahead at every shape of
#: more than 64 MiB, from B 1, 32k on, behind at B 1, 16k and level at B 1, 4k
#: (benchmarks/results/decode-versus-native-queued-chained-*.json). Where one split covers a pair (the pairs fill a
#: wave) the kernel writes the output itself (no merge launch); at 2 to 4 splits the one-read merge takes the
#: partials (1.7-1.8 us against 2.9-3.3 traced on an H100 at B 8, 16k and 32k and B 4, 16k;
#: benchmarks/results/decode-stream-few-merge-chained-*-h100-*.json).
MMA_DEFAULT = ClusterConfig(consumers=4, producers=0, slots=3, cluster=False, few_merge=True)
MMA_MIN_KV_BYTES = 64 * 2**20


def mma_takes(q: Any, k_cache: Any, v_cache: Any, length: int) -> bool:
    """Whether the library's dispatch gives this call to the tensor-core kernel (MMA_DEFAULT) rather than split-K."""
    b, _, _, d = q.shape
    pairs = b * k_cache.shape[1]
    return (d == 128 and 2 * pairs * length * d * q.dtype.size > MMA_MIN_KV_BYTES
            and 0 < length <= k_cache.shape[2] and _mma_fits(q.shape, q.dtype, k_cache.shape, k_cache.dtype,
                                                             v_cache.shape))


@lru_cache(maxsize=256)
def _mma_fits(q_shape: tuple[int, ...], q_dtype: Any, k_shape: tuple[int, ...], k_dtype: Any,
              v_shape: tuple[int, ...]) -> bool:
    # Once per shapes and dtypes: device.hopper() asks MLX for the device's properties.
    return v_shape == k_shape and device.hopper() and cuda_cluster.fits(q_shape, q_dtype, k_shape, k_dtype,
                                                                       MMA_DEFAULT)


def parse_config(text: str) -> DecodeConfig | ClusterConfig:
    """`mma` or `mma:FIELD=VALUE,...` -> the tensor-core kernel without clusters (graph-safe); otherwise split-K's
    fields (`ring=0,unroll=2`). ValueError naming the field it cannot read."""
    if text.split(":")[0] == "mma":
        return ClusterConfig.parse_mma_split(text[4:])
    return DecodeConfig.parse(text)


def native_decode(q: Any, k_cache: Any, v_cache: Any, length: int) -> Any:
    import mlx.core as mx

    return mx.fast.scaled_dot_product_attention(q, k_cache[:, :, :length], v_cache[:, :, :length],
                                                scale=1.0 / math.sqrt(q.shape[-1]))


def decode_plan(q: Any, k_cache: Any, v_cache: Any, length: int, *, use_metal: bool | None = None,
                config: AnyConfig | None = None) -> tuple[str, Callable[[], Any]]:
    """(name of the kernel `decode` runs: split_k, cluster, metal_split_k or native, a call that runs it).

    A ClusterConfig asks for the tensor-core kernel of cuda_cluster.py (Hopper only): in one launch with clusters,
    only with MLX's CUDA graphs off (ValueError otherwise, before anything runs: under MLX 0.32's graphs it would stop
    later custom kernels from running), or with `cluster=False` as mma_split (no clusters, a merge kernel after it),
    under graphs too; where it does not fit, native. Checks its arguments as `decode` does."""
    length, empty = _checked(q, k_cache, v_cache, length, use_metal, config)
    if empty:
        return "native", lambda: arguments.empty_output(q, k_cache, v_cache)
    return _plan(q, k_cache, v_cache, length, use_metal, config)


def _checked(q: Any, k_cache: Any, v_cache: Any, length: Any, use_metal: Any, config: Any) -> tuple[int, bool]:
    """(length as an int, whether the output is empty: `arguments.empty_output` then, no kernel on an empty grid);
    TypeError / ValueError naming the argument that `decode` cannot take."""
    fn = "decode"
    if not (isinstance(q, arguments.Array) and isinstance(k_cache, arguments.Array)
            and isinstance(v_cache, arguments.Array)):
        arguments.require_arrays(fn, {"q": q, "k_cache": k_cache, "v_cache": v_cache})
    if use_metal is not None:
        arguments.optional_flag(fn, "use_metal", use_metal)
    if config is not None:
        arguments.require_config(fn, config, CONFIG_TYPES, "parse_config(text) reads 'ring=0,unroll=2' or 'mma'")
    k_shape = k_cache.shape
    empty = arguments.decode_shapes(q.shape, k_shape, v_cache.shape, (q.dtype, k_cache.dtype, v_cache.dtype))
    return arguments.decode_length(length, k_shape[2]), empty


def _plan(q: Any, k_cache: Any, v_cache: Any, length: int, use_metal: bool | None,
          config: AnyConfig | None) -> tuple[str, Callable[[], Any]]:
    where = device.backend()
    if isinstance(config, ClusterConfig):
        cl = config
        if where == "cuda" and device.hopper() and cuda_cluster.supports(q, k_cache, length, cl) and \
                v_cache.shape == k_cache.shape:
            if cl.cluster and not cuda_cluster.graphs_off():
                raise ValueError(cuda_cluster.GRAPHS_ERROR)
            return ("cluster" if cl.cluster else "mma_split",
                    lambda: cuda_cluster.decode_cluster(q, k_cache, v_cache, length, cl))
        return "native", lambda: native_decode(q, k_cache, v_cache, length)
    if where == "cuda" and not isinstance(config, MetalDecodeConfig):
        if config is None and mma_takes(q, k_cache, v_cache, length):
            return "mma_split", lambda: cuda_cluster.decode_cluster(q, k_cache, v_cache, length, MMA_DEFAULT)
        launch = cuda_split_k.ready_launch(q, k_cache, v_cache, length, config)
        if launch is not None:
            return "split_k", lambda: cuda_split_k.decode_with(launch, q, k_cache, v_cache, length)
    elif (where == "metal" and device.metal_enabled(use_metal) and (config is None or isinstance(config, MetalDecodeConfig))
          and metal_split_k.supports_decode(q, k_cache, length)
          and (mc := config or MetalDecodeConfig()).fits(q.shape[1] // k_cache.shape[1], q.shape[-1])):
        return "metal_split_k", lambda: metal_split_k.decode_metal(q, k_cache, v_cache, length, mc.warps,
                                                                   mc.target_blocks, mc.unroll)
    return "native", lambda: native_decode(q, k_cache, v_cache, length)


@dataclass(frozen=True)
class _Route:
    """The library's CUDA choice for one set of shapes and dtypes, whatever the length: what `decode` needs to pick
    between the tensor-core kernel and split-K from the length alone (mma_takes' rule)."""
    capacity: int
    kv_per_key: int  # bytes of K and V a call reads per key position
    mma: Any  # the tensor-core kernel's launch (cuda_cluster.parts_launch) where it fits these shapes, else None
    launch: cuda_split_k.Launch | None  # split-K's, where it fits
    empty: bool = False  # the output has no elements: no kernel


@lru_cache(maxsize=256)
def _cuda_route(q_shape: tuple[int, ...], q_dtype: Any, k_shape: tuple[int, ...], k_dtype: Any,
                v_shape: tuple[int, ...], v_dtype: Any) -> _Route:
    # One cache lookup a call for the arguments' checks and both kernels' (each was one of its own, and the
    # tensor-core kernel's launch a third, keyed by its nine-field configuration).
    if arguments.decode_shapes(q_shape, k_shape, v_shape, (q_dtype, k_dtype, v_dtype)):
        return _Route(k_shape[2], 0, None, None, empty=True)
    b, _, _, d = q_shape
    mma = d == 128 and _mma_fits(q_shape, q_dtype, k_shape, k_dtype, v_shape)
    return _Route(k_shape[2], 2 * b * k_shape[1] * d * q_dtype.size,
                  cuda_cluster.parts_launch(MMA_DEFAULT, q_shape, k_shape, q_dtype) if mma else None,
                  cuda_split_k.default_launch(q_shape, k_shape, v_shape, q_dtype, k_dtype))


def decode(q: Any, k_cache: Any, v_cache: Any, length: int, *, use_metal: bool | None = None,
           config: AnyConfig | None = None) -> Any:
    """One decode step: q (B, Hq, 1, D) against positions [0, length) of caches (B, Hkv, capacity, D).

    q and the caches: mx.arrays of one dtype (float16, bfloat16 or float32), Hq a multiple of Hkv; `length` an int
    in 1..capacity. Anything else is a TypeError or ValueError naming the argument, before anything runs."""
    # The common case straight to the kernel, without decode_plan's name and closure, its checks made once per shapes
    # with the route: at B 1 a call's Python work is time the caller waits for (benchmarks/decode_host_work.py,
    # decode_host_time.py).
    array = arguments.Array
    if (config is None and use_metal is None and isinstance(q, array) and isinstance(k_cache, array)
            and isinstance(v_cache, array) and device.backend() == "cuda"):
        route = _cuda_route(q.shape, q.dtype, k_cache.shape, k_cache.dtype, v_cache.shape, v_cache.dtype)
        length = arguments.decode_length(length, route.capacity)
        if route.empty:
            return arguments.empty_output(q, k_cache, v_cache)
        if route.mma is not None and length * route.kv_per_key > MMA_MIN_KV_BYTES:
            return cuda_cluster.decode_parts_with(route.mma, q, k_cache, v_cache, length, MMA_DEFAULT)
        if route.launch is not None:
            return cuda_split_k.decode_with(route.launch, q, k_cache, v_cache, length)
        return _plan(q, k_cache, v_cache, length, use_metal, config)[1]()
    length, empty = _checked(q, k_cache, v_cache, length, use_metal, config)
    if empty:
        return arguments.empty_output(q, k_cache, v_cache)
    if isinstance(config, DecodeConfig) and device.backend() == "cuda":
        launch = cuda_split_k.ready_launch(q, k_cache, v_cache, length, config)
        if launch is not None:
            return cuda_split_k.decode_with(launch, q, k_cache, v_cache, length)
    return _plan(q, k_cache, v_cache, length, use_metal, config)[1]()
