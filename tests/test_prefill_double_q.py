"""Two Q buffers in the persistent prefill (`_q2`): named and refused where it cannot apply, its shared memory, the
kernel's own item loop and next-item load (taken from its text and run on the host by g++) loading every item's Q
rows into the buffer that item reads, one item ahead, and the kernels compiled for sm_90a."""

from __future__ import annotations

import shutil
import subprocess
from collections import defaultdict
from pathlib import Path

import pytest
from prefill_units import compiled_spills

from ksearch.backends.nvcc import nvcc_path
from ksearch.kernels.attention import wgmma_ws as WS
from ksearch.kernels.attention.cuda_prefill import blocks_for
from ksearch.kernels.attention.wgmma_ws_text import PERSIST_ITEMS

SPLIT = "ws3_n64_s4_p4_tmas_pst_preg32_cr_wt_sn_hs_kt_uw_q2"  # the dispatch's WIDE_SPLIT_TAIL with two Q buffers
PERSIST = "ws3_n64_s4_p4_tmas_pst_preg32_cr_wt_sn_uw_q2"
PLAIN = "ws2_n128_s3_p4_tmas_pst_q2"  # the plain order: the loop steps by gridDim.x


@pytest.mark.parametrize("name", [SPLIT, PERSIST, PLAIN])
def test_names_round_trip(name: str) -> None:
    cfg = WS.parse_config(name)
    assert cfg.q2 and WS.config_name(cfg) == name and WS.kernel_name(cfg).endswith("_q2")
    assert "Qs0" in WS.source_text(cfg) and "Qs0" not in WS.source_text(WS.parse_config(name.replace("_q2", "")))
    assert not WS.with_bulk_copies(cfg).q2


@pytest.mark.parametrize("name", ["ws3_n64_s4_p4_tmas_cr_q2", "ws3_n64_s4_p4_tmas_pst_qn_q2",
                                  "ws3_n64_s4_p4_tmas_pst_ob_q2"])
def test_where_it_cannot_apply_it_is_refused_in_one_line(name: str) -> None:
    with pytest.raises(ValueError, match="_q2 .* persistent blocks") as err:
        WS.parse_config(name)
    assert "\n" not in str(err.value)


def test_the_second_buffer_fits_wide_at_d128_and_not_tall() -> None:
    wide, tall = WS.parse_config(SPLIT), WS.parse_config("ws2_n128_s3_p4_tmas_pst_q2")
    assert wide.smem_bytes(128) - WS.parse_config(SPLIT.replace("_q2", "")).smem_bytes(128) == 192 * 128 * 2
    assert WS.smem_problem(wide, 128) is None and WS.smem_problem(tall, 64) is None
    assert "shared memory" in (WS.smem_problem(tall, 128) or "")


# The host program: the kernel's preamble (items, sections, snake order, the split tail) and its consumers' loop up
# to the next item's load, run for every block and warpgroup with the device calls recorded instead of made.
HOST = r"""
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
using std::max;
using std::min;
typedef std::uint16_t T;
struct Dim { unsigned x, y, z; };
constexpr int BM = 64 * WG, QB = BM * D, qk_lead = 128, qk_stride = (D / 8) * 128;
static T qsmem[2 * QB];
static const T* q;
static int cur_block, cur_wg;
template <int D_, int N_, int R_> void ks_load_core(T* dst, const T* src, int rows, int) {
  std::printf("load %d %d %td %td %d\n", cur_block, cur_wg, dst - qsmem, src - q, rows);
}
void ks_commit_w() {}
template <int N> void ks_wait_w() {}
void ks_proxy_fence() {}
unsigned long long ks_desc(const void*, int, int) { return 0; }
int main(int argc, char** argv) {
  const int q_shape[4] = {atoi(argv[1]), atoi(argv[2]), atoi(argv[3]), D};
  const int k_shape[4] = {atoi(argv[1]), atoi(argv[4]), atoi(argv[3]), D};
  const unsigned grid = (unsigned)atoi(argv[5]);
  const float scale[1] = {1.f};
  T* base = static_cast<T*>(std::malloc(sizeof(T)));  // only addresses are formed from q, k, v, never read
  q = base;
  const T *k = base, *v = base;
  for (cur_block = 0; cur_block < (int)grid; ++cur_block)
    for (cur_wg = 0; cur_wg < WG; ++cur_wg) {
      const Dim gridDim{grid, 1, 1}, blockIdx{(unsigned)cur_block, 0, 0};
      const int wg = cur_wg, wt = 0;
      T* const Qs0 = qsmem;
@PREAMBLE
@LOOP
      std::printf("item %d %d %u %d %d %d\n", cur_block, wg, qk, bhq, m0, rows_here);
      ++qk;
      }
    }
  std::free(base);
  return 0;
}
"""


def host_program(name: str) -> str:
    """The host program with `name`'s kernel text: its item preamble and its consumers' loop through the `_q2` load
    (inline assembly left out: a barrier, nothing the order depends on)."""
    text = WS.source_text(WS.parse_config(name))
    start = text.index(PERSIST_ITEMS)
    preamble = text[start:text.index("    unsigned long long* bars", start)]
    loop_at = text.rindex("\n", 0, text.index("g0 = 0;  // K / V tiles this block consumed before this item")) + 1
    load_at = text.index("const int q2_next", loop_at)
    end = text.index("      ks_commit_w();\n    }\n", load_at) + len("      ks_commit_w();\n    }\n")
    loop = "".join(line for line in text[loop_at:end].splitlines(keepends=True)
                   if not line.lstrip().startswith("asm volatile"))
    return HOST.replace("@PREAMBLE", preamble).replace("@LOOP", loop)


def _run(tmp_path: Path, name: str, d: int, causal: bool, shape: tuple[int, int, int, int], grid: int) -> list[str]:
    cfg = WS.parse_config(name)
    src, exe = tmp_path / "host.cpp", tmp_path / "host"
    src.write_text(host_program(name))
    flags = [f"-DD={d}", f"-DWG={cfg.wg}", f"-DBN={cfg.bn}", f"-DCAUSAL={'true' if causal else 'false'}"]
    built = subprocess.run(["g++", "-std=c++17", "-O1", "-Wno-unused", *flags, "-o", str(exe), str(src)],
                           capture_output=True, text=True, timeout=120)
    assert built.returncode == 0, built.stderr[-3000:]
    ran = subprocess.run([str(exe), *map(str, shape), str(grid)], capture_output=True, text=True, timeout=120)
    assert ran.returncode == 0, ran.stderr[-2000:]
    return ran.stdout.splitlines()


CASES = [  # (configuration, D, causal, (B, Hq, L, Hkv), blocks): the split tail in three parts, sections, plain order
    (SPLIT, 128, False, (1, 32, 4096, 32), 132),  # 704 items: 5 rounds and 44 split in three
    (SPLIT, 128, False, (2, 16, 1024, 4), 26),  # sections of 24 heads, a last round of 10 in two, a partial block
    (SPLIT, 128, False, (2, 16, 1024, 4), 21),  # a last round of 3 in four parts
    (SPLIT, 128, True, (2, 8, 1000, 2), 36),  # the mask: no split; a partial last block of rows
    (PERSIST, 128, True, (1, 6, 640, 3), 5),  # snake order
    (PLAIN, 64, False, (2, 4, 384, 4), 7),
]


@pytest.mark.skipif(shutil.which("g++") is None, reason="LOUD SKIP: no g++ to run the kernel's item loop on the host")
@pytest.mark.parametrize(("name", "d", "causal", "shape", "grid"), CASES)
def test_each_item_reads_the_q_rows_loaded_for_it_one_item_ahead(tmp_path: Path, name: str, d: int, causal: bool,
                                                                 shape: tuple[int, int, int, int], grid: int) -> None:
    b, hq, length, _ = shape
    wg = WS.parse_config(name).wg
    events: dict[tuple[int, int], list[list[int]]] = defaultdict(list)
    for line in _run(tmp_path, name, d, causal, shape, grid):
        kind, *fields = line.split()
        events[(int(fields[0]), int(fields[1]))].append([0 if kind == "load" else 1, *map(int, fields[2:])])
    qb, bm = 64 * wg * d, 64 * wg
    seen: dict[tuple[int, int], int] = defaultdict(int)
    for (_, w), seq in events.items():
        items = [e[1:] for e in seq if e[0] == 1]  # (qk, bhq, m0, rows_here)
        loads = [(i, e[1:]) for i, e in enumerate(seq) if e[0] == 0]  # (buffer offset, q offset, rows)
        assert [it[0] for it in items] == list(range(len(items)))
        assert len(loads) == len(items), "one load an item: the first item's own, then each next one's"
        for k, (qk, bhq, m0, rows_here) in enumerate(items):
            pos, (dst, src, rows) = loads[k]
            issued_in = sum(1 for e in seq[:pos] if e[0] == 1)  # items finished before the load was issued
            assert issued_in == max(0, k - 1), "item k's Q is loaded during item k - 1 (item 0's at its own start)"
            assert dst == (qk & 1) * qb + w * 64 * d, "into the buffer item k reads, this warpgroup's rows"
            assert src == (bhq * length + m0 + w * 64) * d and rows == max(0, min(64, rows_here - w * 64))
            seen[(bhq, m0)] += 1
    # every item's rows (each split part's too) loaded once by each of its warpgroups
    items = blocks_for((b, hq, length, d), bm)
    assert len(seen) == items and set(seen.values()) <= {wg, 2 * wg, 3 * wg, 4 * wg}


@pytest.mark.skipif(nvcc_path() is None, reason="LOUD SKIP: nvcc not installed")
def test_it_compiles_for_sm_90a_without_new_spills() -> None:
    spills = compiled_spills("q2n", ((SPLIT, 128, False), (SPLIT, 128, True), (PERSIST, 128, False),
                                     ("ws2_n128_s3_p4_tmas_pst_sn_q2", 64, True)))
    # none at D=128 (the split tail without it spills 32 bytes); TALL at D=64 spills 12 bytes with the mask without it
    assert spills["q2n0"] == spills["q2n1"] == spills["q2n2"] == 0 and spills["q2n3"] <= 24, spills
