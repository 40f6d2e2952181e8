"""GQA decode for Hopper with scores and P V on tensor cores: in one launch, the splits of a (batch, kv head) merged
across a thread-block cluster (SOURCE), or without clusters, each split's partial merged by split-K's merge kernel in
a second launch (PARTS_SOURCE, `ClusterConfig(cluster=False)`: "mma_split", safe under MLX's CUDA graphs).

Why not the split-K kernel (cuda_split_k.py): it spends ~46 instructions a key a warp on CUDA cores (FMAs, shuffles,
conversions), reaching 3.1-3.5 TB/s at the large shapes (0.80x-0.97x of cuDNN), and it merges its splits in a second
launch (a second MLX graph node, ~7 us of host dispatch at small shapes, where the whole read takes ~4 us).

Per block, PW producer warps stream the key rows of one (batch, kv head, split) into shared memory with 16-byte
`cp.async`, chunks XOR-swizzled by row so that `ldmatrix` hits distinct banks, and each lane's copies arrive on the
slot's "full" mbarrier when they land (`cp.async.mbarrier.arrive.noinc`). (One bulk copy a row, the first version,
streamed only 5-15 GB/s a block; one a tile cannot be swizzled: benchmarks/findings.md.) NC consumer warps take whole tiles
of BK keys in turn, each from its own SPW slots: S = Q K^T by `mma.sync` m16n8k16 with the G query heads of the kv head
as the M rows (padded to 16: the tensor cores have room to spare, what counts is the instruction count), online
softmax in fp32 with the exp2 trick, P straight from S's accumulators into P V (V through `ldmatrix.trans`). The
warps merge in shared memory; the CS splits of one (batch, kv head) form one cluster (`__cluster_dims__`, at most 8
blocks) and merge through distributed shared memory, each rank writing a slice of the output. One kernel, one graph
node, no zero-initialised scratch (the one-launch split-K variant needed an atomic counter and MLX's fill for it).

The cluster kernel is opt-in, and only with MLX's CUDA graphs off (MLX_USE_CUDA_GRAPHS=0 before MLX starts): under
MLX 0.32.4's graphs, once a kernel with cluster dims has run, later custom kernels without them silently do not run
(reproduced by benchmarks/experiments/cluster_graph_hazard.py; docs/kernels-decode.md). Measured on the H200 with
graphs off: 1.22x of native as a geometric mean over `ksearch bench decode`'s shapes, where split-K gives 1.14x; but
graphs off slows native as well (B 16, 16k: 373 us, 258 us with graphs on). The graph-safe variant with no producer
warp (`decode.MMA_DEFAULT`) is the library's kernel for calls of more than 64 MiB of K/V at D=128
(`decode.mma_takes`); alone it takes cuDNN's time at B 16, 16k (docs/kernels-decode.md).
"""

from __future__ import annotations

import dataclasses
import math
import os
from dataclasses import dataclass
from functools import cache, lru_cache
from typing import Any

from ksearch.kernels.cuda_headers import MBARRIER_HEADER, MMA_SYNC_HEADER
from ksearch.kernels.decode.cuda_cluster_text import CLUSTER_HEADER, PARTS_SOURCE, PARTS_TMA_SOURCE, SOURCE
from ksearch.kernels.decode.cuda_split_k import merge_partials
from ksearch.kernels.kernel_text import cuda_kernel
from ksearch.kernels.tensor_map import TMA_HEADER, encode


@dataclass(frozen=True)
class ClusterConfig:
    # Consumer warps (NC). On the H200, 2 was the only configuration above native with CUDA graphs on (1.09x); with
    # them off it measured 1.22x, 4 consumers with 2 producers 1.26x (ahead at B 1-8, behind at B 16 and D 64).
    consumers: int = 2
    producers: int = 1     # warps that issue the copies (PW); 0: each consumer warp copies its own tiles ahead
    keys: int = 32         # keys per tile (BK), a multiple of 16
    slots: int = 2         # tiles in flight per consumer warp (SPW)
    max_cluster: int = 8   # most splits of one (batch, kv head): a cluster of at most 8 blocks is portable
    sms: int = 132         # H200 / H100 SXM; the split count aims at one wave over them
    # False: no cluster dims (safe under MLX's CUDA graphs): as many splits as one wave holds, each writing its
    # partial to global memory, merged by cuda_split_k's merge kernel (a second launch).
    cluster: bool = True
    # With producers=0 and cluster=False: the tiles come by tensor copies (TMA, 128-byte swizzle) through a map the
    # host encodes once per cache shape (kernels/tensor_map.py), one copy per 64 columns of K and of V, instead of
    # 16-byte cp.async a lane. Caches laid out (B, Hkv, capacity, D), row-contiguous; others read nothing (NaN).
    tma: bool = False
    # With cluster=False: at most cuda_split_k.MERGE_FEW splits merged by the one-read merge (one thread an output
    # element, every split's reads issued at once) instead of the block-a-head merge (decode.MMA_DEFAULT's choice).
    few_merge: bool = False

    def threads(self) -> int:
        return 32 * (self.consumers + self.producers)

    @classmethod
    def parse(cls, text: str) -> ClusterConfig:
        """`consumers=4,producers=2,cluster=0` -> ClusterConfig (fields not named keep their defaults)."""
        from ksearch.kernels.decode.cuda_split_k import parse_fields

        return cls(**parse_fields(cls, text))

    @classmethod
    def parse_mma_split(cls, text: str) -> ClusterConfig:
        """`consumers=4,producers=2` -> the graph-safe variant's configuration (cluster=False whatever the text says)."""
        return dataclasses.replace(cls.parse(text), cluster=False)

    def smem_bytes(self, d: int, g: int) -> int:
        slots = self.consumers * self.slots * 2 * self.keys * d * 2
        merge = 4 * (self.consumers * g * (d + 2) + g * (d + 2))
        maps = 256 + 1024 if self.tma else 0  # two maps' staging copies, and the slots aligned to 1024 bytes
        return 128 * math.ceil(16 * self.consumers * self.slots / 128) + maps + max(slots, merge)

    def blocks_per_sm(self, d: int, g: int) -> int:
        # Registers a thread, rounded up from ptxas's counts (122-184 at 32 keys a tile, 178-218 at 64): too few
        # blocks a wave costs a little parallelism, too many a second wave.
        regs = 232 if self.keys >= 64 else 192
        return max(1, min(228 * 1024 // (self.smem_bytes(d, g) + 1024), 65536 // (self.threads() * regs)))


def config_problem(cfg: ClusterConfig) -> str | None:
    """Why a configuration can never run, in words (None when it can)."""
    if cfg.keys % 16 or not 16 <= cfg.keys <= 128:
        return f"keys={cfg.keys}: use a multiple of 16 from 16 to 128"
    if not 1 <= cfg.consumers <= 8 or not 0 <= cfg.producers <= 4 or not 1 <= cfg.slots <= 4:
        return "consumers 1-8, producers 0-4 (0: each consumer copies its own tiles) and slots 1-4 a warp"
    if cfg.max_cluster not in (1, 2, 4, 8):
        return f"max_cluster={cfg.max_cluster}: use 1, 2, 4 or 8 (a portable cluster has at most 8 blocks)"
    if cfg.tma and (cfg.producers or cfg.cluster):
        return "tma=1 takes producers=0 and the kernel without clusters (cluster=0, or the mma: form)"
    if cfg.smem_bytes(128, 16) > 227 * 1024:
        return f"{cfg.smem_bytes(128, 16)} bytes of shared memory at D=128: fewer consumers, keys or slots"
    return None


def graphs_off() -> bool:
    """Whether MLX's CUDA graphs are off for this process (MLX reads MLX_USE_CUDA_GRAPHS when it starts)."""
    return os.environ.get("MLX_USE_CUDA_GRAPHS", "").strip() == "0"


GRAPHS_ERROR = ("the cluster decode kernel needs MLX_USE_CUDA_GRAPHS=0 set before MLX starts: under MLX 0.32's CUDA "
                "graphs, once a cluster kernel has run, later custom kernels silently do not run; set it, or use the "
                "default split-K kernel (no `config=`, or --kernel split_k)")


def supports(q: Any, k_cache: Any, length: int, cfg: ClusterConfig | None = None) -> bool:
    return 0 < length <= k_cache.shape[2] and fits(q.shape, q.dtype, k_cache.shape, k_cache.dtype, cfg or ClusterConfig())


@lru_cache(maxsize=256)  # shapes vary as a cache grows: bounded, as split-K's launches are
def fits(q_shape: tuple[int, ...], q_dtype: Any, k_shape: tuple[int, ...], k_dtype: Any, cfg: ClusterConfig) -> bool:
    """Per shapes, dtypes and configuration, once: the checks are a decode call's host work (at B 1 the caller waits
    for it), and the answer does not change with the length."""
    import mlx.core as mx

    if q_dtype not in (mx.float16, mx.bfloat16) or k_dtype != q_dtype or len(q_shape) != 4 or len(k_shape) != 4:
        return False
    b, hq, t, d = q_shape
    hkv = k_shape[1]
    return t == 1 and d in (64, 128) and hq % hkv == 0 and hq // hkv <= 16 and config_problem(cfg) is None


def cluster_size(bh: int, length: int, d: int, g: int, cfg: ClusterConfig) -> int:
    """Splits per (batch, kv head): the most (a power of two up to max_cluster) that keep every block in one wave
    and give each split at least two tiles."""
    room = cfg.sms * cfg.blocks_per_sm(d, g)
    cs = 1
    while cs * 2 <= cfg.max_cluster and bh * cs * 2 <= room and math.ceil(length / cfg.keys) >= 4 * cs:
        cs *= 2
    return cs


def wave_splits(bh: int, length: int, d: int, g: int, cfg: ClusterConfig) -> int:
    """Splits per (batch, kv head) without a cluster: as many as keep every block in one wave, at least two tiles
    each (one split where the (batch, kv head) pairs alone fill a wave)."""
    return _splits(cfg.sms * cfg.blocks_per_sm(d, g), bh, length, cfg.keys)


def _splits(room: int, bh: int, length: int, keys: int) -> int:
    return max(1, min(room // max(1, bh), math.ceil(length / keys) // 2))


def header(cfg: ClusterConfig, cs: int) -> str:
    """MLX writes the `__global__` line, so launch bounds and the cluster shape ride on a redefinition of it."""
    cluster = f" __cluster_dims__(1, {cs}, 1)" if cs > 1 else ""
    # TMA_HEADER in every variant: the body names its helpers in branches that only the tensor-copy variant takes.
    return (MMA_SYNC_HEADER + MBARRIER_HEADER + TMA_HEADER + CLUSTER_HEADER
            + "\n#undef __global__\n#define __global__ __attribute__((global)) "
            f"__attribute__((launch_bounds({cfg.threads()}, 1))){cluster}\n")


@cache
def _kernel(cfg: ClusterConfig, cs: int, smem: int, constants: tuple[tuple[str, Any], ...]) -> Any:
    # The name says every header-level choice (launch bounds, cluster shape) and the shared-memory size, for
    # profiles; what keeps kernels apart is the digest `cuda_kernel` adds (text and shared memory). `constants`
    # (`template`) are written into the text: calls pass no template arguments (kernel_text.constant_lines).
    name = f"ks_decode_cluster_w{cfg.consumers}_p{cfg.producers}_k{cfg.keys}_s{cfg.slots}_c{cs}_m{smem}"
    return cuda_kernel(name=name, input_names=["q", "k", "v"], output_names=["o"], source=SOURCE,
                       header=header(cfg, cs), constants=constants, ensure_row_contiguous=False, shared_memory=smem)


@cache
def _parts_kernel(cfg: ClusterConfig, smem: int, constants: tuple[tuple[str, Any], ...]) -> Any:
    name = f"ks_decode_mma_split_w{cfg.consumers}_p{cfg.producers}_k{cfg.keys}_s{cfg.slots}_m{smem}" \
        + ("_tma" if cfg.tma else "")
    if cfg.tma:
        return cuda_kernel(name=name, input_names=["q", "k", "v", "tmap"],
                           output_names=["part_acc", "part_ml", "maps"], source=PARTS_TMA_SOURCE,
                           header=header(cfg, 1), constants=constants, ensure_row_contiguous=False,
                           shared_memory=smem)
    return cuda_kernel(name=name, input_names=["q", "k", "v"], output_names=["part_acc", "part_ml"],
                       source=PARTS_SOURCE, header=header(cfg, 1), constants=constants, ensure_row_contiguous=False,
                       shared_memory=smem)


@cache
def tma_map(d: int, capacity: int, rows: int, keys: int) -> Any:
    """The tensor map over a (rows = B x Hkv, capacity, D) cache of 2-byte elements, boxes of 64 columns x `keys`
    rows with the 128-byte swizzle, then the capacity (the kernel checks its views against it): 18 uint64, made once
    per cache shape."""
    import mlx.core as mx
    import numpy as np

    words = np.frombuffer(encode((d, capacity, rows), (d * 2, capacity * d * 2), (64, keys, 1), swizzle=3),
                          dtype=np.uint64)
    arr = mx.array(np.concatenate([words, np.array([capacity, 0], dtype=np.uint64)]))
    mx.eval(arr)
    return arr


def template(dtype: Any, d: int, g: int, cfg: ClusterConfig, cs: int) -> tuple[tuple[str, Any], ...]:
    """The kernels' constants (written into their text by `_kernel` and `_parts_kernel`)."""
    return (("T", dtype), ("D", d), ("G", g), ("NC", cfg.consumers), ("PW", cfg.producers), ("BK", cfg.keys),
            ("SPW", cfg.slots), ("CS", cs), ("TMA", cfg.tma))


def decode_cluster(q: Any, k_cache: Any, v_cache: Any, length: int, cfg: ClusterConfig | None = None) -> Any:
    cfg = cfg or ClusterConfig()
    if not cfg.cluster:
        return _decode_parts(q, k_cache, v_cache, length, cfg)
    if not graphs_off():
        raise ValueError(GRAPHS_ERROR)
    b, hq, _, d = q.shape
    hkv = k_cache.shape[1]
    g = hq // hkv
    cs = cluster_size(b * hkv, length, d, g, cfg)
    nt = cfg.threads()
    kern = _kernel(cfg, cs, cfg.smem_bytes(d, g), template(q.dtype, d, g, cfg, cs))
    # Views, not copies: the kernel reads strides, and the K view's shape tells it the length.
    return kern(inputs=[q, k_cache[:, :, :length], v_cache[:, :, :length]], grid=(b * hkv * nt, cs, 1),
                threadgroup=(nt, 1, 1), output_shapes=[q.shape], output_dtypes=[q.dtype])[0]


@dataclass(frozen=True)
class _PartsLaunch:
    """What a call of the graph-safe variant needs besides the length, made once per shapes, dtype and configuration
    (`parts_launch`): each call's Python work is host time that a queued stream of calls adds to the device's
    (benchmarks/decode_stream.py)."""

    kernel: Any
    threads: int
    bh: int
    g: int
    room: int
    direct: Any  # the one-launch kernel without cluster dims: where one split covers a (batch, kv head), no merge


@lru_cache(maxsize=256)
def parts_launch(cfg: ClusterConfig, q_shape: tuple[int, ...], k_shape: tuple[int, ...], dtype: Any) -> _PartsLaunch:
    b, hq, _, d = q_shape
    bh, g = b * k_shape[1], hq // k_shape[1]
    smem = cfg.smem_bytes(d, g)
    return _PartsLaunch(_parts_kernel(cfg, smem, template(dtype, d, g, cfg, 0)), cfg.threads(), bh, g,
                        cfg.sms * cfg.blocks_per_sm(d, g),
                        None if cfg.tma else _kernel(cfg, 1, smem, template(dtype, d, g, cfg, 1)))


def mma_partials(q: Any, k_cache: Any, v_cache: Any, length: int, cfg: ClusterConfig) -> tuple[Any, Any]:
    """The graph-safe variant's one launch of BODY + PARTS_TAIL over (batch x kv head, splits): each split's
    unnormalised accumulator (B x Hkv, splits, G, D) and its row maxima and sums (B x Hkv, splits, G, 2), fp32."""
    lp = parts_launch(cfg, q.shape, k_cache.shape, q.dtype)
    return _partials(lp, q, k_cache, v_cache, length, cfg, _splits(lp.room, lp.bh, length, cfg.keys))


def _partials(lp: _PartsLaunch, q: Any, k_cache: Any, v_cache: Any, length: int, cfg: ClusterConfig,
              ns: int) -> tuple[Any, Any]:
    import mlx.core as mx

    d = q.shape[-1]
    # V whole: the kernel reads its strides only (K's view carries the length); one slice fewer a call.
    inputs = [q, k_cache[:, :, :length], v_cache]
    shapes: list[tuple[int, ...]] = [(lp.bh, ns, lp.g, d), (lp.bh, ns, lp.g, 2)]
    dtypes = [mx.float32, mx.float32]
    if cfg.tma:
        inputs.append(tma_map(d, k_cache.shape[2], lp.bh, cfg.keys))
        shapes.append((lp.bh * ns * 32 + 16,))  # 256 bytes of published maps a block, room to align to 128
        dtypes.append(mx.uint64)
    part_acc, part_ml = lp.kernel(inputs=inputs, grid=(lp.bh * lp.threads, ns, 1),
                                  threadgroup=(lp.threads, 1, 1), output_shapes=shapes, output_dtypes=dtypes)[:2]
    return part_acc, part_ml


def _decode_parts(q: Any, k_cache: Any, v_cache: Any, length: int, cfg: ClusterConfig) -> Any:
    """The graph-safe variant: where the (batch, kv head) pairs fill a wave (one split each), the one-launch kernel
    without cluster dims writes the output itself (SOURCE with CS = 1: no partials, no merge launch, safe under
    graphs: nothing of a cluster is in it); otherwise mma_partials, then split-K's merge."""
    return decode_parts_with(parts_launch(cfg, q.shape, k_cache.shape, q.dtype), q, k_cache, v_cache, length, cfg)


def decode_parts_with(lp: _PartsLaunch, q: Any, k_cache: Any, v_cache: Any, length: int, cfg: ClusterConfig) -> Any:
    """`_decode_parts` with its launch worked out before (`parts_launch(cfg, ...)`)."""
    ns = _splits(lp.room, lp.bh, length, cfg.keys)
    if ns == 1 and lp.direct is not None:
        return lp.direct(inputs=[q, k_cache[:, :, :length], v_cache], grid=(lp.bh * lp.threads, 1, 1),
                         threadgroup=(lp.threads, 1, 1), output_shapes=[q.shape], output_dtypes=[q.dtype])[0]
    return merge_partials(*_partials(lp, q, k_cache, v_cache, length, cfg, ns), q, few=cfg.few_merge)
