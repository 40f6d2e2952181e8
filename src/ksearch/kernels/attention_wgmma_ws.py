"""The wgmma FlashAttention prefill with a producer warp (FA-3's warp specialisation, without TMA).

In `attention_wgmma.SOURCE` every thread loads K / V and a `__syncthreads` per tile hands the stages over, which keeps
the block's warpgroups in lockstep: all of them multiply at once and all of them run their softmax at once, so the
tensor cores idle during the softmax. Here one extra warp only loads (`cp.async`, completion tracked by mbarriers
through `cp.async.mbarrier.arrive`), and each consumer warpgroup waits on "full" mbarriers and releases stages on
"empty" ones on its own schedule; the warp scheduler can then run one warpgroup's softmax while another's product is
on the tensor cores. The steps (products, softmax) are the same code as the synchronous kernel's.

NOT YET RUN on a GPU when written: `benchmarks/attention_wgmma_check.py` checks it (configurations "ws...").
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ksearch.kernels.attention_cuda import build_kernel, fits, launch
from ksearch.kernels.attention_wgmma import EPILOGUE, HEADER, MAX_SMEM, REGISTERS, SETUP, STEPS

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
    if (threadIdx.x >= NT) {  // the PT producer threads: tile t into stage t % STAGES once consumers released t - STAGES
      const int pl = threadIdx.x - NT;
      for (int t = 0; t < ntiles; ++t) {
        const int st = t % STAGES, ph = (t / STAGES) & 1;
        if (t >= STAGES) ks_mbar_wait(kempty + st, ph ^ 1);
        ks_load_core<D, PT>(Ks + st * KB, kg + (size_t)t * BN * D, BN, pl);
        ks_cp_mbar_arrive(kfull + st);
        if (t >= STAGES) ks_mbar_wait(vempty + st, ph ^ 1);
        ks_load_core<D, PT>(Vs + st * KB, vg + (size_t)t * BN * D, BN, pl);
        ks_cp_mbar_arrive(vfull + st);
      }
      ks_wait_all_w();
      return;
    }
    // Consumers: this warpgroup's 64 query rows, then only its own named barrier (1 + wg) from here on.
    ks_load_core<D, 128>(Qs + wg * 64 * D, qg + (size_t)wg * 64 * D, max(0, min(64, rows_here - wg * 64)), wt);
    ks_commit_w();
    ks_wait_all_w();
    ks_proxy_fence();
    asm volatile("bar.sync %0, 128;\n" :: "r"(1 + wg) : "memory");
"""

WS_LOOP = r"""
    // Waiting on a "full" mbarrier, then a proxy fence: the producer's cp.async writes (generic proxy) become
    // visible to this warpgroup's wgmma reads (async proxy).
    auto wait_full = [&](unsigned long long* bar, int t) {
      ks_mbar_wait(bar + t % STAGES, (t / STAGES) & 1);
      ks_proxy_fence();
    };
    auto release = [&](unsigned long long* bar, int t) {  // one arrival per warp, after its wgmma wait
      if (lane == 0) ks_mbar_arrive(bar + t % STAGES);
    };
    wait_full(kfull, 0);
    ks_fence_regs<BN / 2>(s);
    ks_wg_fence();
    issue_s(0);
    ks_wg_wait0();
    ks_fence_regs<BN / 2>(s);
    release(kempty, 0);
    softmax(0);
    take_p();
    for (int t = 1; t < ntiles; ++t) {
      wait_full(kfull, t);
      wait_full(vfull, t - 1);
      ks_fence_regs<BN / 2>(s);
      ks_fence_regs<D / 2>(oacc);
      ks_fence_u<BN / 4>(&pa[0][0]);
      ks_wg_fence();
      issue_s(t);
      issue_pv(t - 1);
      ks_wg_wait1();
      ks_fence_regs<BN / 2>(s);
      release(kempty, t);
      softmax(t);
      ks_fence_regs<BN / 2>(s);
      ks_wg_wait0();
      ks_fence_regs<D / 2>(oacc);
      ks_fence_u<BN / 4>(&pa[0][0]);
      release(vempty, t - 1);
      take_p();
    }
    wait_full(vfull, ntiles - 1);
    ks_fence_regs<D / 2>(oacc);
    ks_fence_u<BN / 4>(&pa[0][0]);
    ks_wg_fence();
    issue_pv(ntiles - 1);
    ks_wg_wait0();
    ks_fence_regs<D / 2>(oacc);
"""

SOURCE = "    constexpr int STAGES = NSTAGES, PT = 32 * PWARPS;" + SETUP + WS_SPLIT + REGISTERS + STEPS + WS_LOOP + EPILOGUE


@dataclass(frozen=True)
class WsConfig:
    wg: int = 2      # consumer warpgroups per block (64 query rows each)
    bn: int = 64     # keys per K / V tile
    stages: int = 2  # K / V stages in shared memory
    pwarps: int = 1  # producer warps

    def smem_bytes(self, d: int) -> int:
        return (64 * self.wg + 2 * self.stages * self.bn) * d * 2 + 4 * self.stages * 8


def supports(q: Any, k: Any, v: Any, causal: bool, cfg: WsConfig) -> bool:
    return cfg.smem_bytes(q.shape[-1]) <= MAX_SMEM and fits(q, k, v, causal, 64, cfg.bn, 0)  # partial last block


def attention_wgmma_ws(q: Any, k: Any, v: Any, causal: bool = False, cfg: WsConfig | None = None) -> Any:
    cfg = cfg or WsConfig()
    kern = build_kernel(f"ks_flash_wgmma_ws_wg{cfg.wg}_n{cfg.bn}_s{cfg.stages}_p{cfg.pwarps}", SOURCE, HEADER,
                        cfg.smem_bytes(q.shape[-1]))
    return launch(kern, q, k, v, 64 * cfg.wg, 128 * cfg.wg + 32 * cfg.pwarps,
                  [("WG", cfg.wg), ("BN", cfg.bn), ("CAUSAL", bool(causal)), ("NSTAGES", cfg.stages),
                   ("PWARPS", cfg.pwarps)])
