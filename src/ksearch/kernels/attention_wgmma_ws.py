"""The wgmma FlashAttention prefill handing K / V stages over through mbarriers instead of `__syncthreads`.

In `attention_wgmma.SOURCE` every thread loads K / V and a `__syncthreads` per tile hands the stages over, which keeps
the block's warpgroups in lockstep: all of them multiply at once and all of them run their softmax at once, so the
tensor cores idle during the softmax. Here one extra warp only loads (`cp.async`, completion tracked by mbarriers
through `cp.async.mbarrier.arrive`), and each consumer warpgroup waits on "full" mbarriers and releases stages on
"empty" ones on its own schedule; the warp scheduler can then run one warpgroup's softmax while another's product is
on the tensor cores. The steps (products, softmax) are the same code as the synchronous kernel's. SOURCE_MB does the
same without a producer (every thread loads, four stages).

A producer warpgroup (PWARPS = 4) hands its registers to the consumers with `setmaxnreg` (it keeps 24; three
consumer warpgroups get 160 each, two get 240): the loads leave the consumers, whose time Nsight Compute found a third
spent on them (cp.async address arithmetic stalled on a full LSU queue, and the per-tile __syncthreads). Measured on
the H200: ws3_n64_s3_p4 reaches 399-419 TFLOP/s at L=8192, D=128 without a mask, against the synchronous kernel's
352-360, and 365 vs 320 causal (once the causal mask stopped spilling); D=128 went from 0.58x to 0.64x of cuDNN over
the grid, D=64 gained nothing. It is the Hopper default at D=128 (kernels/attention.py). Without setmaxnreg (earlier
sessions) a producer warp's loads bound
the kernel, and 4 producer warps left room for only 2 consumer warpgroups; the producerless variant is within 1% of
the synchronous one. Others are opt-in: KSEARCH_WGMMA_CONFIG.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ksearch.kernels.attention_cuda import build_kernel, fits, launch
from ksearch.kernels.attention_wgmma import (
    EPILOGUE,
    HEADER,
    MAX_SMEM,
    REGISTERS,
    SETUP,
    STEPS,
    cp_cache,
    launch_bounds,
    pipeline,
)

# mbarriers after the K / V stages: K full, K empty, V full, V empty (STAGES each). "Full" counts the PT producer
# threads' cp.async arrivals; "empty" one arrival per consumer warp.
WS_SPLIT = r"""
    unsigned long long* bars = reinterpret_cast<unsigned long long*>(Vs + STAGES * KB);
    unsigned long long *kfull = bars, *kempty = bars + STAGES, *vfull = bars + 2 * STAGES, *vempty = bars + 3 * STAGES;
    if (threadIdx.x == 0) {
      for (int i = 0; i < STAGES; ++i) {
        ks_mbar_init(kfull + i, PT); ks_mbar_init(kempty + i, NT / 32);
        ks_mbar_init(vfull + i, PT); ks_mbar_init(vempty + i, NT / 32);
      }
    }
    __syncthreads();  // the last block-wide barrier: producer and consumers part here
    // A producer warpgroup (PWARPS = 4) gives its registers to the consumers (setmaxnreg; the launch bound gave every
    // thread 65536 / threads): it keeps 24, they take what is left, up to 240.
    constexpr int CREG = ((65536 - 128 * 24) / NT / 8 * 8) > 240 ? 240 : ((65536 - 128 * 24) / NT / 8 * 8);
    if (threadIdx.x >= NT) {  // the PT producer threads: tile t into stage t % STAGES once consumers released t - STAGES
      if (PT == 128) asm volatile("setmaxnreg.dec.sync.aligned.u32 24;\n" ::: "memory");
      const int pl = threadIdx.x - NT;
      for (int t = 0; t < ntiles; ++t) {
        const int st = t % STAGES, ph = (t / STAGES) & 1;
        if (t >= STAGES) ks_mbar_wait(kempty + st, ph ^ 1);
        ks_load_core<D, PT, BN>(Ks + st * KB, kg + (size_t)t * BN * D, BN, pl);
        ks_cp_mbar_arrive(kfull + st);
        if (t >= STAGES) ks_mbar_wait(vempty + st, ph ^ 1);
        ks_load_core<D, PT, BN>(Vs + st * KB, vg + (size_t)t * BN * D, BN, pl);
        ks_cp_mbar_arrive(vfull + st);
      }
      ks_wait_w<0>();
      return;
    }
    if (PT == 128) asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" :: "n"(CREG) : "memory");
    // Consumers: this warpgroup's 64 query rows, then only its own named barrier (1 + wg) from here on.
    ks_load_core<D, 128, 64>(Qs + wg * 64 * D, qg + (size_t)wg * 64 * D, max(0, min(64, rows_here - wg * 64)), wt);
    ks_commit_w();
    ks_wait_w<0>();
    ks_proxy_fence();
    asm volatile("bar.sync %0, 128;\n" :: "r"(1 + wg) : "memory");
"""

WS_HANDOVER = r"""
    // Waiting on a "full" mbarrier, then a proxy fence: the producer's cp.async writes (generic proxy) become
    // visible to this warpgroup's wgmma reads (async proxy).
    auto wait_full = [&](unsigned long long* bar, int t) {
      ks_mbar_wait(bar + t % STAGES, (t / STAGES) & 1);
      ks_proxy_fence();
    };
    auto release = [&](unsigned long long* bar, int t) {  // one arrival per warp, after its wgmma wait
      if (lane == 0) ks_mbar_arrive(bar + t % STAGES);
    };
"""


# Without a producer (pwarps=0): every thread loads its share of tile t + 2 at step t and arrives on that stage's
# "full" mbarrier through cp.async.mbarrier.arrive (so the barrier completes once all of the tile has landed); each
# warp arrives on the "empty" one after its O += P V of the tile. No __syncthreads: a warpgroup can run up to a step
# ahead of the others, so one's softmax can meet another's products (4 stages: loads two tiles ahead).
MB_SPLIT = r"""
    unsigned long long* bars = reinterpret_cast<unsigned long long*>(Vs + STAGES * KB);
    unsigned long long *full = bars, *empty = bars + STAGES;
    if (threadIdx.x == 0) {
      for (int i = 0; i < STAGES; ++i) { ks_mbar_init(full + i, NT); ks_mbar_init(empty + i, NT / 32); }
    }
    __syncthreads();  // barriers initialised; the only block-wide barrier
    auto load_tile = [&](int t) {  // this thread's share of K(t), V(t); the arrival also covers its earlier copies
      const int st = t % STAGES;
      if (t >= STAGES) ks_mbar_wait(empty + st, ((t - STAGES) / STAGES) & 1);
      ks_load_core<D, NT, BN>(Ks + st * KB, kg + (size_t)t * BN * D, BN, threadIdx.x);
      ks_load_core<D, NT, BN>(Vs + st * KB, vg + (size_t)t * BN * D, BN, threadIdx.x);
      ks_cp_mbar_arrive(full + st);
    };
    ks_load_core<D, NT, BM>(Qs, qg, rows_here, threadIdx.x);  // covered by tile 0's arrival
    load_tile(0);
    if (ntiles > 1) load_tile(1);
"""

MB_HANDOVER = r"""
    auto wait_full = [&](int t) {  // then a proxy fence: other threads' cp.async writes, visible to wgmma reads
      ks_mbar_wait(full + t % STAGES, (t / STAGES) & 1);
      ks_proxy_fence();
    };
"""


SOURCE_MB = ("    constexpr int STAGES = NSTAGES;" + SETUP + MB_SPLIT + REGISTERS + STEPS + MB_HANDOVER
             + pipeline(first="if (ntiles > 2) load_tile(2);\nwait_full(0);",
                        step="if (t + 2 < ntiles) load_tile(t + 2);  // waits for every warp's O += P(t-2) V(t-2)\n"
                             "wait_full(t);",
                        after_pv="if (lane == 0) ks_mbar_arrive(empty + (t - 1) % STAGES);  // done with tile t - 1",
                        last="", end="ks_wait_w<0>();") + EPILOGUE)
SOURCE = ("    constexpr int STAGES = NSTAGES, PT = 32 * PWARPS;" + SETUP + WS_SPLIT + REGISTERS + STEPS + WS_HANDOVER
          + pipeline(first="wait_full(kfull, 0);", after_s0="release(kempty, 0);",
                     step="wait_full(kfull, t);\nwait_full(vfull, t - 1);", after_s="release(kempty, t);",
                     after_pv="release(vempty, t - 1);", last="wait_full(vfull, ntiles - 1);") + EPILOGUE)


@dataclass(frozen=True)
class WsConfig:
    wg: int = 2      # consumer warpgroups per block (64 query rows each)
    bn: int = 64     # keys per K / V tile
    stages: int = 2  # K / V stages in shared memory
    pwarps: int = 1  # producer warps; 0: no producer, every thread loads (SOURCE_MB)
    cp: str = "cg"   # cp.async cache mode (attention_wgmma.cp_cache)

    def smem_bytes(self, d: int) -> int:
        return 256 + (64 * self.wg + 2 * self.stages * self.bn) * d * 2 + 4 * self.stages * 8


def supports(q: Any, k: Any, v: Any, causal: bool, cfg: WsConfig) -> bool:
    if cfg.pwarps == 0 and cfg.stages < 4:  # loads run two tiles ahead of the one released last
        return False
    # a producer warpgroup raises the consumers to at most 240 registers: one consumer warpgroup (255 at entry) would
    # have setmaxnreg.inc lower its count, which PTX leaves undefined
    if cfg.pwarps == 4 and cfg.wg not in (2, 3):
        return False
    return cfg.smem_bytes(q.shape[-1]) <= MAX_SMEM and fits(q, k, v, causal, 64, cfg.bn, 0)  # partial last block


def attention_wgmma_ws(q: Any, k: Any, v: Any, causal: bool = False, cfg: WsConfig | None = None) -> Any:
    cfg = cfg or WsConfig()
    pre, tag = cp_cache(cfg.cp)
    kern = build_kernel(f"ks_flash_wgmma_ws_wg{cfg.wg}_n{cfg.bn}_s{cfg.stages}_p{cfg.pwarps}{tag}",
                        SOURCE if cfg.pwarps else SOURCE_MB,
                        pre + HEADER + launch_bounds(128 * cfg.wg + 32 * cfg.pwarps), cfg.smem_bytes(q.shape[-1]))
    return launch(kern, q, k, v, 64 * cfg.wg, 128 * cfg.wg + 32 * cfg.pwarps,
                  [("WG", cfg.wg), ("BN", cfg.bn), ("CAUSAL", bool(causal)), ("NSTAGES", cfg.stages),
                   ("PWARPS", cfg.pwarps)])


def parse_config(name: str) -> Any:
    """"wgW_nN[_sS][_ca]" -> WgmmaConfig(W, N, S); "wsW_nN_sS[_pP][_ca]" -> WsConfig(W, N, S, P) (P defaults to 1). For
    KSEARCH_WGMMA_CONFIG and the GPU check script; raises ValueError with the accepted forms."""
    import re

    from ksearch.kernels.attention_wgmma import WgmmaConfig

    m = re.fullmatch(r"(?:wg(\d)_n(\d+)(?:_s(\d))?|ws(\d)_n(\d+)_s(\d)(?:_p(\d))?)(_ca)?", name.strip())
    if not m:
        raise ValueError(f"{name!r} is not a wgmma configuration: use wgW_nN[_sS][_ca] (e.g. wg3_n64, wg3_n64_s3) or "
                         "wsW_nN_sS[_pP][_ca] (e.g. ws3_n64_s3_p4; _ca: cp.async through L1)")
    cp = "ca" if m[8] else "cg"
    if m[1]:
        return WgmmaConfig(int(m[1]), int(m[2]), int(m[3] or 2), cp)
    return WsConfig(int(m[4]), int(m[5]), int(m[6]), int(m[7] or 1), cp)
