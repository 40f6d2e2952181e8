"""Split-K flash-decoding for MLX-CUDA: one GQA decode step against a KV cache of fixed capacity.

Pass 1 (`split` kernel): one block per (batch, kv head, split of the valid keys). All G = Hq / Hkv query heads of the kv
head live in the same block, so each K/V row is read from HBM exactly once. A key row of D halves is shared by D/8 lanes
that each load 16 bytes (one `uint4`), so a warp reads 512 contiguous bytes per key step; U key steps are issued
before the first use to keep enough loads in flight for HBM. Scores use the exp2 trick (q is pre-scaled by
log2(e)/sqrt(D)); each lane keeps an online-softmax state per query head; the warp then the block merge their states,
and the block writes its un-normalised partial (max, sum, acc[D]) per head in fp32.
Pass 2: the last block of each (batch, head block) to finish combines the splits with a log-sum-exp merge (FUSED, one
launch; an atomic counter says who is last), or a separate `merge` kernel with one block per (batch, query head).
Only keys [0, length) are read: K/V are passed as views `cache[:, :, :length]` (no copy, strides honoured), so one
compiled kernel serves every length and a call creates no device scalars.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from functools import cache, lru_cache
from typing import Any

from ksearch.kernels.decode.cuda_split_k_text import (
    FUSED_SOURCE,
    HEADER,
    MERGE_FEW_SOURCE,
    MERGE_SOURCE,
    SPLIT_RING_SOURCE,
    SPLIT_SOURCE,
    work_floats,
)
from ksearch.kernels.kernel_text import cuda_kernel


@dataclass(frozen=True)
class DecodeConfig:
    warps: int = 4          # warps per block of the split kernel
    unroll: int = 4         # key steps in flight per warp (the sweep's best on the H200, with the defaults below)
    prefetch: bool = True   # load step i+1 into registers while computing step i
    target_blocks: int = 1056  # aim for ~8 blocks per SM on an H200 (132 SMs); 1 = no split
    # Keys per split at least: 512 beat 128 by 3-6% as a geomean over `bench decode`'s shapes, in two processes on
    # the H200, mostly at B 1 (findings.md); at B 16 the chunks are longer anyway.
    min_chunk: int = 512
    # ...unless min_chunk would leave fewer blocks than this: then chunks shrink (to FLOOR_MIN_KEYS at least) until
    # there are. Chained calls (a decode loop's) wait on each call's latency, which few blocks cannot hide: at B 1, 4k
    # 64 blocks of 512 keys ran 0.97x of native, 256 of 128 keys 1.21x (decode-versus-native-queued-chained-splits-*),
    # the split kernel 13.2 against 8.5 us (decode-stream-chained-floor-b1-*). 0: min_chunk holds everywhere.
    floor_blocks: int = 256
    group_heads: bool = True  # all query heads of a kv head in one block (K/V read once) vs one head per block
    # Last block merges (one launch, FUSED_SOURCE) vs a separate merge kernel.
    fused: bool = False
    # > 0: launch bounds asking ptxas for this many resident blocks an SM (registers capped to fit; it spills past
    # that). 0: ptxas's choice (168 registers with the defaults: three blocks of four warps an SM on Hopper).
    min_blocks: int = 0
    # > 0: the steps' rows go through shared memory, this many steps in the ring (RING_LOOP), instead of registers.
    ring: int = 0

    def keys_per_step(self, d: int) -> int:
        return self.warps * (32 // (d // 8)) * self.unroll

    def shared_bytes(self, g: int, d: int) -> int:
        """Static shared memory of the split kernel a block: the warps' merge, and the ring where there is one."""
        merge = self.warps * g * (d + 2) * 4
        return merge + (self.ring * 2 * self.unroll * self.warps * 32 * 16 if self.ring else 0)

    @classmethod
    def parse(cls, text: str) -> DecodeConfig:
        """`warps=8,unroll=4,fused=1` -> DecodeConfig (fields not named keep their defaults); ValueError naming the
        fields there are for an unknown one, and for a value that is not an integer."""
        return cls(**parse_fields(cls, text))


def parse_fields(cls: type, text: str) -> dict[str, Any]:
    """`a=1,b=0` -> keyword arguments for the dataclass `cls`, whose fields are all integers or booleans."""
    fields = {f.name: type(getattr(cls(), f.name)) for f in dataclasses.fields(cls)}
    kwargs: dict[str, Any] = {}
    for item in filter(None, text.replace(" ", "").split(",")):
        key, _, value = item.partition("=")
        if key not in fields:
            raise ValueError(f"unknown {cls.__name__} field {key!r}; fields: {', '.join(fields)}")
        try:
            number = int(value)
        except ValueError:
            raise ValueError(f"{key}={value!r}: give an integer (0 or 1 for {key})" if fields[key] is bool
                             else f"{key}={value!r}: give an integer") from None
        kwargs[key] = bool(number) if fields[key] is bool else number
    return kwargs


def supports(q: Any, k_cache: Any, length: int) -> bool:
    """Whether the kernel takes q against positions [0, length) of this cache (ready_launch's checks)."""
    return ready_launch(q, k_cache, k_cache, length) is not None


def plan(blocks: int, length: int, d: int, cfg: DecodeConfig) -> tuple[int, int]:
    """(nsplit, chunk) for `blocks` (batch x head-block) blocks: enough splits to fill the GPU, chunks a multiple of
    the block's key step."""
    chunk = chunk_keys(length, max(1, cfg.target_blocks // max(1, blocks)), cfg.keys_per_step(d), cfg.min_chunk,
                       _floor_chunk(cfg, blocks))
    return -(-length // chunk), chunk


#: The floor (DecodeConfig.floor_blocks) shortens splits to this many keys at most (or min_chunk where smaller):
#: the shortest measured ahead; shorter ones would add merge work for little latency.
FLOOR_MIN_KEYS = 128


def chunk_keys(length: int, want: int, step: int, min_chunk: int, floor_splits: int = 0) -> int:
    """Keys a split reads: the length over `want` splits, at least `min_chunk`, rounded up to whole steps; where
    `floor_splits` > 0, no longer than gives that many splits, unless that is under FLOOR_MIN_KEYS."""
    chunk = max(min_chunk, -(-length // want))
    if floor_splits:
        chunk = min(chunk, max(min(min_chunk, FLOOR_MIN_KEYS), -(-length // floor_splits)))
    return -(-chunk // step) * step


def _floor_chunk(cfg: DecodeConfig, blocks: int) -> int:
    """The splits that make cfg.floor_blocks blocks of `blocks` (batch x head-block) blocks; 0: no floor."""
    return -(-cfg.floor_blocks // max(1, blocks)) if cfg.floor_blocks else 0


def launch_bounds(threads: int, min_blocks: int) -> str:
    """MLX writes the `__global__` line itself, so launch bounds ride on a redefinition of `__global__`."""
    return ("\n#undef __global__\n#define __global__ __attribute__((global)) "
            f"__attribute__((launch_bounds({threads}, {min_blocks})))\n")


@cache
def _kernels(cfg: DecodeConfig, constants: tuple[tuple[str, Any], ...]) -> tuple[Any, Any | None]:
    """(split, merge) kernels, or (fused, None), with `constants` (the split's template arguments: T, D, G first)
    written into their text: called without template arguments, which MLX would format into every call
    (kernel_text.constant_lines)."""
    # The bounds and the ring go in the name, for profiles (the digest `cuda_kernel` adds keeps kernels apart).
    tag = f"w{cfg.warps}_u{cfg.unroll}" + (f"_b{cfg.min_blocks}" if cfg.min_blocks else "") \
        + (f"_r{cfg.ring}" if cfg.ring else "")
    header = HEADER + (launch_bounds(cfg.warps * 32, cfg.min_blocks) if cfg.min_blocks else "")
    if cfg.fused:
        fused = cuda_kernel(
            name=f"ks_decode_fused_{tag}", input_names=["q", "k", "v"],
            output_names=["o", "work"], source=FUSED_SOURCE, header=header, constants=constants,
            ensure_row_contiguous=False)
        return fused, None
    split = cuda_kernel(
        name=f"ks_decode_split_{tag}", input_names=["q", "k", "v"],
        output_names=["part_acc", "part_ml"], source=SPLIT_RING_SOURCE if cfg.ring else SPLIT_SOURCE, header=header,
        constants=constants, ensure_row_contiguous=False)
    (_, dtype), (_, d), (_, g) = constants[:3]
    return split, merge_kernel(dtype, d, g)


@cache
def merge_kernel(dtype: Any, d: int, g: int) -> Any:
    """The log-sum-exp merge for partials of G query heads of D, output in `dtype` (constants T, D, G)."""
    return cuda_kernel(name="ks_decode_merge", input_names=["part_acc", "part_ml"], output_names=["o"],
                       source=MERGE_SOURCE, constants=(("T", dtype), ("D", d), ("G", g)))


@dataclass(frozen=True)
class Launch:
    """What a call's launch needs that does not depend on the length, worked out once per shapes, dtype and
    configuration: at B 1 a call's Python work (this module's arithmetic and argument lists as much as MLX's graph
    building) was half its time on the H200 (benchmarks/results/process-trace-*.json). The kernels themselves are
    made at the first call (`_kernels`), so that a launch can be planned where CUDA is absent."""
    cfg: DecodeConfig
    blocks: int
    g: int
    d: int
    step: int     # keys per block iteration
    want: int     # splits that would fill the GPU
    floor: int    # splits that make cfg.floor_blocks blocks (0: none), as chunk_keys takes them
    template: list[tuple[str, Any]]  # the split kernel's constants (T, D, G first), written into its text
    threadgroup: tuple[int, int, int]
    threads: int
    merge: dict[str, Any]
    # The split kernel's keyword arguments per split count, made at the first call with that count (a decode loop
    # meets a handful of counts): a call then builds no shapes, grid or dtype lists of its own.
    split_args: dict[int, dict[str, Any]] = field(default_factory=dict, compare=False, repr=False)
    # (split, merge) kernel objects, taken from `_kernels` at the first call: its cache would hash the configuration
    # (nine fields) every call.
    made: list[Any] = field(default_factory=list, compare=False, repr=False)
    # Split counts by length (`nsplit`): the arithmetic is a microsecond of a B 1 call's host time.
    splits: dict[int, int] = field(default_factory=dict, compare=False, repr=False)

    def kernels(self) -> list[Any]:
        if not self.made:
            self.made.extend(_kernels(self.cfg, tuple(self.template)))
        return self.made

    def nsplit(self, length: int) -> int:
        """plan()'s split count, kept per length for the first MEMO_LENGTHS lengths a launch meets."""
        n = self.splits.get(length)
        if n is None:
            n = -(-length // chunk_keys(length, self.want, self.step, self.cfg.min_chunk, self.floor))
            if len(self.splits) < MEMO_LENGTHS:
                self.splits[length] = n
        return n


def ready_launch(q: Any, k_cache: Any, v_cache: Any, length: int, cfg: DecodeConfig | None = None) -> Launch | None:
    """The launch for a call against positions [0, length), or None where the kernel does not take it."""
    launch = launch_for(q, k_cache, v_cache, cfg)
    return launch if launch is not None and 0 < length <= k_cache.shape[2] else None


def launch_for(q: Any, k_cache: Any, v_cache: Any, cfg: DecodeConfig | None = None) -> Launch | None:
    """The launch for these inputs whatever the length, or None where the kernel does not fit them (dtypes, head dim,
    group size, caches of one shape); without a configuration the library's (default_for)."""
    if cfg is None:
        return default_launch(q.shape, k_cache.shape, v_cache.shape, q.dtype, k_cache.dtype)
    return _checked_launch(q.shape, k_cache.shape, v_cache.shape, q.dtype, k_cache.dtype, cfg)


@lru_cache(maxsize=256)
def default_launch(qshape: tuple[int, ...], kshape: tuple[int, ...], vshape: tuple[int, ...], dtype: Any,
                   kdtype: Any) -> Launch | None:
    # Keyed by shapes and dtypes alone: hashing a DecodeConfig (nine fields) each call costs as much as the rest.
    return _checked_launch(qshape, kshape, vshape, dtype, kdtype, default_for(qshape[1] // kshape[1], qshape[-1]))


@lru_cache(maxsize=256)
def _checked_launch(qshape: tuple[int, ...], kshape: tuple[int, ...], vshape: tuple[int, ...], dtype: Any,
                    kdtype: Any, cfg: DecodeConfig) -> Launch | None:
    import mlx.core as mx

    b, hq, t, d = qshape
    hkv = kshape[1]
    if dtype not in (mx.float16, mx.bfloat16) or kdtype != dtype or vshape != kshape or t != 1 or d not in (64, 128) \
            or hq % hkv or hq // hkv > 8:
        return None
    return _launch(b, hq, hkv, d, dtype, cfg)


@lru_cache(maxsize=256)
def _launch(b: int, hq: int, hkv: int, d: int, dtype: Any, cfg: DecodeConfig) -> Launch:
    g = hq // hkv if cfg.group_heads else 1
    if cfg.ring and (cfg.fused or cfg.ring < 2):
        raise ValueError(f"ring={cfg.ring}: a ring has 2 steps at least and is not made for the fused kernel")
    if cfg.shared_bytes(g, d) > MAX_STATIC_SHARED:
        raise ValueError(f"{cfg} needs {cfg.shared_bytes(g, d)} bytes of shared memory a block at G {g}, D {d}; "
                         f"MLX's kernels get {MAX_STATIC_SHARED}: lower ring, unroll or warps")
    nt = cfg.warps * 32
    blocks = b * hq // g
    merge = {"grid": (b * hq * d, 1, 1), "threadgroup": (d, 1, 1), "output_shapes": [(b, hq, 1, d)],
             "output_dtypes": [dtype]}
    return Launch(cfg, blocks, g, d, cfg.keys_per_step(d),
                  max(1, cfg.target_blocks // max(1, blocks)), _floor_chunk(cfg, blocks),
                  [("T", dtype), ("D", d), ("G", g), ("NW", cfg.warps), ("U", cfg.unroll), ("PREFETCH", cfg.prefetch)]
                  + ([("RING", cfg.ring)] if cfg.ring else []),
                  (nt, 1, 1), nt, merge)


#: Lengths a launch keeps split counts for: a decode loop's every length up to 32k and more (a few MB at most).
MEMO_LENGTHS = 1 << 16
#: Static shared memory a block may declare (MLX's custom kernels set no larger dynamic size).
MAX_STATIC_SHARED = 48 * 1024
#: The library's configuration: 4 warps, 4 steps in flight through a ring of 2 steps in shared memory
#: (benchmarks/results/decode-versus-native-queued-ring-*.json), where that fits in MLX's 48 KB (G <= 4 at D 128).
DEFAULT = DecodeConfig(ring=2)
#: The same steps in flight in registers: where DEFAULT's ring does not fit.
PLAIN = DecodeConfig()


@lru_cache(maxsize=64)
def default_for(g: int, d: int) -> DecodeConfig:
    """DEFAULT where its shared memory fits a block of G query heads of D, PLAIN elsewhere."""
    return DEFAULT if DEFAULT.shared_bytes(g, d) <= MAX_STATIC_SHARED else PLAIN


def decode_cuda(q: Any, k_cache: Any, v_cache: Any, length: int, cfg: DecodeConfig | None = None) -> Any:
    """v_cache must have k_cache's shape (decode_plan checks)."""
    b, hq, _, d = q.shape
    hkv = k_cache.shape[1]
    return decode_with(_launch(b, hq, hkv, d, q.dtype, cfg or default_for(hq // hkv, d)), q, k_cache, v_cache, length)


def decode_with(launch: Launch, q: Any, k_cache: Any, v_cache: Any, length: int) -> Any:
    """One call with a launch worked out before. The kernel takes the length from K's view and V's layout from V's
    strides, so V goes in whole (one slice less to build and dispatch a call)."""
    import mlx.core as mx

    split, merge = launch.kernels()
    if launch.cfg.fused:
        nsplit = launch.nsplit(length)
        return split(inputs=[q, k_cache[:, :, :length], v_cache],
                     output_shapes=[q.shape, (work_floats(launch.blocks, nsplit, launch.g, launch.d),)],
                     output_dtypes=[q.dtype, mx.float32], init_value=0, grid=(launch.blocks * launch.threads, nsplit, 1),
                     threadgroup=launch.threadgroup)[0]
    return merge(inputs=_partials(launch, split, q, k_cache, v_cache, length), **launch.merge)[0]


def split_partials(launch: Launch, q: Any, k_cache: Any, v_cache: Any, length: int) -> tuple[Any, Any]:
    """The split kernel's (part_acc, part_ml), as merge_partials takes them (also to time the split kernel alone)."""
    if launch.cfg.fused:
        raise ValueError("the fused kernel merges in its own launch: it has no partials to return")
    part_acc, part_ml = _partials(launch, launch.kernels()[0], q, k_cache, v_cache, length)
    return part_acc, part_ml


def _partials(launch: Launch, split: Any, q: Any, k_cache: Any, v_cache: Any, length: int) -> Any:
    import mlx.core as mx

    nsplit = launch.nsplit(length)
    args = launch.split_args.get(nsplit)
    if args is None:
        blocks, g, d = launch.blocks, launch.g, launch.d
        args = launch.split_args[nsplit] = {
            "output_shapes": [(blocks, nsplit, g, d), (blocks, nsplit, g, 2)],
            "output_dtypes": [mx.float32, mx.float32], "grid": (blocks * launch.threads, nsplit, 1),
            "threadgroup": launch.threadgroup}
    # Views, not copies: the kernel reads strides, and the K view's shape tells it the length (no per-call scalars).
    return split(inputs=[q, k_cache[:, :, :length], v_cache], **args)


#: The most splits the one-read merge (MERGE_FEW_SOURCE) takes.
MERGE_FEW = 4


@cache
def merge_few_kernel(dtype: Any, d: int, g: int) -> Any:
    """The merge of at most MERGE_FEW splits, one thread an output element (constants T, D, G, NF)."""
    return cuda_kernel(name="ks_decode_merge_few", input_names=["part_acc", "part_ml"], output_names=["o"],
                       source=MERGE_FEW_SOURCE, constants=(("T", dtype), ("D", d), ("G", g), ("NF", MERGE_FEW)))


def merge_partials(part_acc: Any, part_ml: Any, q: Any, *, few: bool = False) -> Any:
    """The log-sum-exp merge of split partials part_acc (blocks, nsplit, G, D) and part_ml (blocks, nsplit, G, 2),
    blocks = B x Hq / G, into the output (q's shape and dtype); `few`: by the one-read merge where there are at most
    MERGE_FEW splits."""
    b, hq, _, d = q.shape
    kernel = merge_few_kernel if few and part_acc.shape[1] <= MERGE_FEW else merge_kernel
    return kernel(q.dtype, d, part_acc.shape[2])(inputs=[part_acc, part_ml], grid=(b * hq * d, 1, 1),
                                                 threadgroup=(d, 1, 1), output_shapes=[q.shape],
                                                 output_dtypes=[q.dtype])[0]
