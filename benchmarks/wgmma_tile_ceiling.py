"""The tensor cores' ceiling for one K / V tile of the wgmma prefill: cycles a tile when a block does nothing but the
tile's products, for each tile layout, beside the datasheet's rate (4,096 fp16 FLOP a cycle an SM on an H100).

Each block (one an SM) keeps W warpgroups of 64 query rows busy on D=128 tiles of N keys, as the prefill's consumers
do but without loads, softmax or barriers: S = Q K^T as D / 16 products m64nNk16 (Q from shared memory, or with
`q_registers` from registers), O += P V as N / 16 products m64n128k16 (P from registers, V read MN-major), and P's
row sums as N / 16 products m64n8k16, committed as one group a tile with one group left in flight. Operands are
random values in shared memory (the tensor cores' power, hence the clock, depends on the data); the core-matrix
layout without swizzle. The cycles are the SM's clock (clock64) over the loop, the median over the blocks and calls,
so they are comparable to the prefill's own cycles a tile (`prefill_item_trace.py`) whatever the board's clock.

    python benchmarks/wgmma_tile_ceiling.py OUT_DIR [--layouts wide,tall,n176] [--tiles 2000]

Layouts: `wide` 3 warpgroups, 64-key tiles (the library's D=128 kernels, `WIDE` and `WIDE_PERSIST`); `tall` 2
warpgroups, 128-key tiles (`TALL`); `tall_rq` the same with Q in registers for S; `n176` 2 warpgroups, 176-key tiles
(FlashAttention-3's D=128 tile without the mask); `n192` 2 warpgroups, 192-key tiles; `_r1` one row-sum product a tile
(the dispatch's at D=128 since), `_nosum` none. Q in registers with 3 warpgroups does not fit even this loop (ptxas serialises its
wgmmas and spills at 166 registers), so the prefill's consumers, which hold a softmax besides, have no room for it.
Shared memory the products read: S 2,048 + 32 N bytes a product (Q's 64 x 16, unless in registers, and K's N x 16) for
2,048 N FLOP, P V 4,096 bytes (V's 16 x 128) for 262,144: at the full rate S with N = 64 needs Hopper's whole 128
bytes a cycle.

On an H100 (`wgmma-tile-ceiling-mlx-cuda-nvidia-h100-80gb-hbm3.json`): every layout with P's row sums took 436-443
cycles a 64 x 64 block of S and P V, whether 64, 128, 176 or 192 keys a tile and Q in shared memory or registers: the
operands' shared-memory reads do not hold those products back. Without the row sums the library's tile took 1,153
cycles against 1,330 (hence `_r1`, wgmma_ws_row_sums), its products then reading 128 bytes a cycle, all that Hopper's
shared memory gives: there the reads may bind. With one row-sum product a tile the library's tile took 1,200 cycles,
`TALL`'s 1,568 against 1,537 without row sums, 176 keys 2,144 against 2,113: `_r1` takes back all but 2-4% of what the
row sums cost. The rates came out above the datasheet's (4,720-5,460 FLOP a cycle
by clock64 against 4,096; 994-1,133 TFLOP/s over the grid by the host's clock against 989): what sets the
absolute rate is not settled here, so read the layouts against each other, not against `tensor_fraction`.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from dataclasses import dataclass
from typing import Any

D = 128
FLOP_PER_CYCLE = 4096  # the datasheet's dense fp16 / bf16 rate of an H100 SXM's SM (989 TFLOP/s at 1,830 MHz, 132 SMs)


@dataclass(frozen=True)
class Layout:
    name: str
    wg: int      # consumer warpgroups a block, 64 query rows each
    n: int       # keys a tile
    q_registers: bool = False
    # P's row sums on the tensor cores: "blocks" one m64n8k16 a 16 keys (the kernels' way before `_r1`), "tile" one a
    # tile (`_r1`; the FADDs that sum the blocks first are not the tensor cores' and are left out), "none"
    row_sums: str = "blocks"

    def threads(self) -> int:
        return 128 * self.wg

    def smem_elements(self) -> int:
        return (64 * self.wg + 2 * self.n) * D + 128  # Q, K, V, the ones of P's row sums

    def tile_flop(self) -> int:
        return 4 * self.wg * 64 * self.n * D  # S and P V, two FLOP a multiply-add

    def ideal_cycles(self) -> float:
        return self.tile_flop() / FLOP_PER_CYCLE

    def smem_bytes_per_tile(self) -> int:
        """Shared-memory bytes the products read a tile: Q (unless in registers) and K for S, V for P V."""
        steps = D // 16
        s_bytes = steps * ((0 if self.q_registers else 2048) + 32 * self.n)
        return self.wg * (s_bytes + (self.n // 16) * 4096)


LAYOUTS = {layout.name: layout for layout in (
    Layout("wide", 3, 64), Layout("wide_nosum", 3, 64, row_sums="none"), Layout("tall", 2, 128),
    Layout("tall_rq", 2, 128, q_registers=True), Layout("n176", 2, 176), Layout("n192", 2, 192),
    Layout("wide_r1", 3, 64, row_sums="tile"), Layout("tall_r1", 2, 128, row_sums="tile"),
    Layout("tall_nosum", 2, 128, row_sums="none"), Layout("n176_r1", 2, 176, row_sums="tile"),
    Layout("n176_nosum", 2, 176, row_sums="none"))}


def wgmma_functions(ns: tuple[int, ...]) -> str:
    """`ks_s<N>` (S from Q in shared memory, scale-d as given), `ks_sr<N>` (Q's fragment from registers) for each N,
    `ks_pv` (m64n128k16, P from registers, V transposed) and `ks_rowsum` (m64n8k16), fp16; each include-guarded, so
    that several kernels' headers can share a translation unit."""
    out = []
    for n in ns:
        out.append(f"#ifndef KS_TILE_CEILING_N{n}\n#define KS_TILE_CEILING_N{n}")
        regs = n // 2
        dl = ",".join(f"%{i}" for i in range(regs))
        for scale_d, con in ((0, "=f"), (1, "+f")):
            cons = ", ".join(f'"{con}"(d[{i}])' for i in range(regs))
            out.append(
                f"__device__ __forceinline__ void ks_s{n}_{scale_d}(float* d, unsigned long long da, "
                f"unsigned long long db) {{\n  asm volatile(\"wgmma.mma_async.sync.aligned.m64n{n}k16.f32.f16.f16 "
                f"{{{dl}}}, %{regs}, %{regs + 1}, {scale_d}, 1, 1, 0, 0;\\n\" : {cons} : \"l\"(da), \"l\"(db));\n}}")
            a = ",".join(f"%{regs + i}" for i in range(4))
            out.append(
                f"__device__ __forceinline__ void ks_sr{n}_{scale_d}(float* d, const unsigned* a, "
                f"unsigned long long db) {{\n  asm volatile(\"wgmma.mma_async.sync.aligned.m64n{n}k16.f32.f16.f16 "
                f"{{{dl}}}, {{{a}}}, %{regs + 4}, {scale_d}, 1, 1, 0;\\n\" : {cons} : \"r\"(a[0]), \"r\"(a[1]), "
                f"\"r\"(a[2]), \"r\"(a[3]), \"l\"(db));\n}}")
        out.append("#endif")
    out.append("#ifndef KS_TILE_CEILING_PV\n#define KS_TILE_CEILING_PV")
    dl = ",".join(f"%{i}" for i in range(64))
    cons = ", ".join(f'"+f"(d[{i}])' for i in range(64))
    out.append(
        "__device__ __forceinline__ void ks_pv(float* d, const unsigned* a, unsigned long long db) {\n"
        f"  asm volatile(\"wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16 {{{dl}}}, {{%64,%65,%66,%67}}, %68, "
        f"1, 1, 1, 1;\\n\" : {cons} : \"r\"(a[0]), \"r\"(a[1]), \"r\"(a[2]), \"r\"(a[3]), \"l\"(db));\n}}")
    out.append(
        "__device__ __forceinline__ void ks_rowsum(float* d, const unsigned* a, unsigned long long db) {\n"
        "  asm volatile(\"wgmma.mma_async.sync.aligned.m64n8k16.f32.f16.f16 {%0,%1,%2,%3}, {%4,%5,%6,%7}, %8, "
        "1, 1, 1, 0;\\n\" : \"+f\"(d[0]), \"+f\"(d[1]), \"+f\"(d[2]), \"+f\"(d[3]) : \"r\"(a[0]), \"r\"(a[1]), "
        "\"r\"(a[2]), \"r\"(a[3]), \"l\"(db));\n}")
    out.append("#endif")
    return "\n".join(out)


def header(layout: Layout) -> str:
    from ksearch.kernels.attention.wgmma import launch_bounds
    from ksearch.kernels.cuda_headers import WGMMA_HEADER

    return WGMMA_HEADER + wgmma_functions((layout.n,)) + launch_bounds(layout.threads())


def source(layout: Layout) -> str:
    """The kernel body: inputs x (the random shared-memory image) and tiles; outputs cycles (one a block) and sink."""
    n, s_fn = layout.n, ("ks_sr" if layout.q_registers else "ks_s") + str(layout.n)
    q_arg = "qa[kc]" if layout.q_registers else "dq0 + 16 * kc"
    row_sum_products = {"blocks": "N / 16", "tile": "1", "none": "0"}[layout.row_sums]
    return f"""
    constexpr int WG = {layout.wg}, N = {n}, D = {D}, NT = 128 * WG;
    extern __shared__ __align__(128) unsigned char ks_smem[];
    __half* Qs = reinterpret_cast<__half*>(ks_smem);
    __half* Ks = Qs + WG * 64 * D;
    __half* Vs = Ks + N * D;
    __half* ones = Vs + N * D;
    for (int i = threadIdx.x; i < x_shape[0]; i += NT) Qs[i] = x[i];
    ks_proxy_fence();
    __syncthreads();
    const int wg = threadIdx.x / 128, wt = threadIdx.x % 128;
    // Core-matrix layout, no swizzle: Q and K K-major (leading 128 B, stride a core-matrix row of D / 8 of them),
    // V MN-major (leading a core-matrix row, stride 128 B); 16 columns of Q or K are 256 bytes on, 16 keys of V 32 D.
    const unsigned long long dq0 = ks_desc(Qs + wg * 64 * D, 128, (D / 8) * 128);
    const unsigned long long dk0 = ks_desc(Ks, 128, (D / 8) * 128);
    const unsigned long long dv0 = ks_desc(Vs, (D / 8) * 128, 128);
    const unsigned long long d1 = ks_desc(ones, 128, 256);
    const unsigned* words = reinterpret_cast<const unsigned*>(Qs);
    unsigned p[N / 16][4];
    #pragma unroll
    for (int kk = 0; kk < N / 16; ++kk) {{
      #pragma unroll
      for (int j = 0; j < 4; ++j) p[kk][j] = words[(wt * 4 + kk * 97 + j * 31) & 4095];
    }}
    {"unsigned qa[D / 16][4];" if layout.q_registers else ""}
    {'''#pragma unroll
    for (int kc = 0; kc < D / 16; ++kc) {
      #pragma unroll
      for (int j = 0; j < 4; ++j) qa[kc][j] = words[(wg * 4096 + wt * 4 + kc * 61 + j * 17) & 8191];
    }''' if layout.q_registers else ""}
    float s[N / 2], o[D / 2], l[4] = {{0.f, 0.f, 0.f, 0.f}};
    #pragma unroll
    for (int i = 0; i < D / 2; ++i) o[i] = 0.f;
    const int count = tiles[0];
    __syncthreads();
    unsigned long long ns0, ns1;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(ns0));
    const long long start = clock64();
    for (int t = 0; t < count; ++t) {{
      ks_wg_fence();
      #pragma unroll
      for (int kc = 0; kc < D / 16; ++kc) {{
        if (kc == 0) {s_fn}_0(s, {q_arg}, dk0); else {s_fn}_1(s, {q_arg}, dk0 + 16 * kc);
      }}
      #pragma unroll
      for (int kk = 0; kk < N / 16; ++kk) ks_pv(o, p[kk], dv0 + 2 * D * kk);
      #pragma unroll
      for (int kk = 0; kk < {row_sum_products}; ++kk) ks_rowsum(l, p[kk], d1);
      ks_wg_commit();
      ks_wg_wait1();
    }}
    ks_wg_wait0();
    __syncthreads();
    const long long stop = clock64();
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(ns1));
    if (threadIdx.x == 0) {{
      cycles[2 * blockIdx.x] = stop - start;
      cycles[2 * blockIdx.x + 1] = (long long)(ns1 - ns0);
    }}
    float acc = l[0];
    #pragma unroll
    for (int i = 0; i < N / 2; ++i) acc += s[i];
    #pragma unroll
    for (int i = 0; i < D / 2; ++i) acc += o[i];
    sink[blockIdx.x * NT + threadIdx.x] = acc;
"""


def kernel(layout: Layout) -> Any:
    import mlx.core as mx

    return mx.fast.cuda_kernel(name=f"ks_wgmma_tile_ceiling_{layout.name}", input_names=["x", "tiles"],
                               output_names=["cycles", "sink"], source=source(layout), header=header(layout),
                               shared_memory=max(2 * layout.smem_elements(), 116 * 1024))  # one block an SM


def measure(layout: Layout, tiles: int, blocks: int, calls: int) -> dict[str, Any]:
    import mlx.core as mx

    kern = kernel(layout)
    x = mx.random.normal((layout.smem_elements(),), key=mx.random.key(0)).astype(mx.float16)
    count = mx.array([tiles], dtype=mx.int32)
    samples: list[float] = []
    wall: list[float] = []  # a call's seconds on the host: the whole grid's rate, a check on the clocks
    rates: list[float] = []  # clock64 ticks a microsecond of the global timer: the SM clock in MHz
    for call in range(calls + 1):
        cycles, sink = kern(inputs=[x, count], grid=(blocks * layout.threads(), 1, 1),
                            threadgroup=(layout.threads(), 1, 1),
                            output_shapes=[(blocks, 2), (blocks * layout.threads(),)],
                            output_dtypes=[mx.int64, mx.float32])
        started = time.perf_counter()
        mx.eval(cycles, sink)
        seconds = time.perf_counter() - started
        if call:
            wall.append(seconds)  # the first call compiles and warms up
            for clocks, ns in cycles.tolist():
                samples.append(clocks / tiles)
                rates.append(clocks / ns * 1000)
    per_tile = statistics.median(samples)
    return {"layout": layout.name, "warpgroups": layout.wg, "keys_a_tile": layout.n, "q_registers": layout.q_registers,
            "cycles_per_tile": per_tile, "cycles_per_tile_min": min(samples), "cycles_per_tile_max": max(samples),
            "sm_clock_mhz": statistics.median(rates), "flop_per_cycle": layout.tile_flop() / per_tile,
            "call_s": statistics.median(wall),
            "tflops": blocks * tiles * layout.tile_flop() / statistics.median(wall) / 1e12,
            "ideal_cycles_per_tile": layout.ideal_cycles(), "tensor_fraction": layout.ideal_cycles() / per_tile,
            "smem_bytes_per_cycle_needed_at_peak": layout.smem_bytes_per_tile() / layout.ideal_cycles(),
            "smem_bytes_per_cycle_measured": layout.smem_bytes_per_tile() / per_tile,
            "cycles_per_64x64_block": per_tile * 64 * 64 / (layout.wg * 64 * layout.n)}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", help="directory for the JSON result")
    parser.add_argument("--layouts", default=",".join(LAYOUTS),
                        help=f"comma-separated, of {', '.join(LAYOUTS)}")
    parser.add_argument("--tiles", type=int, default=2000, help="tiles a block (default 2000)")
    parser.add_argument("--blocks", type=int, default=132, help="blocks (default 132: one an SM of an H100 / H200)")
    parser.add_argument("--calls", type=int, default=5, help="timed calls after one warm-up (default 5)")
    args = parser.parse_args(argv)
    names = [name for name in args.layouts.split(",") if name]
    unknown = [name for name in names if name not in LAYOUTS]
    if unknown:
        sys.exit(f"unknown layout {', '.join(unknown)}: use {', '.join(LAYOUTS)}")
    if args.tiles < 1 or args.blocks < 1 or args.calls < 1:
        sys.exit("--tiles, --blocks and --calls take a positive count")
    from ksearch.kernels.device import hopper

    if not hopper():
        sys.exit("wgmma_tile_ceiling: wgmma needs MLX's CUDA backend on a Hopper GPU (sm_90); run it on one")
    from ksearch.backends import get_backend
    from ksearch.bench.results import make_result, write_result

    rows = []
    for name in names:
        row = measure(LAYOUTS[name], args.tiles, args.blocks, args.calls)
        print(f"{name:8s} {row['cycles_per_tile']:8.0f} cycles a tile at {row['sm_clock_mhz']:.0f} MHz "
              f"({row['flop_per_cycle']:.0f} FLOP a cycle, {row['tensor_fraction']:.3f} of "
              f"{FLOP_PER_CYCLE}), {row['cycles_per_64x64_block']:.1f} cycles a 64 x 64 "
              f"block; shared memory {row['smem_bytes_per_cycle_measured']:.0f} B a cycle read by the products "
              f"({row['smem_bytes_per_cycle_needed_at_peak']:.0f} at the full rate); the grid "
              f"{row['tflops']:.0f} TFLOP/s "
              f"by the host's clock", flush=True)
        rows.append(row)
    data = make_result("wgmma-tile-ceiling", get_backend("mlx-cuda"), rows, [[args.blocks, args.tiles, D]],
                       ["float16"], notes=__doc__.split("\n\n")[0].replace("\n", " "))
    print(write_result(data, args.out, stem="wgmma-tile-ceiling"), flush=True)


if __name__ == "__main__":
    main()
