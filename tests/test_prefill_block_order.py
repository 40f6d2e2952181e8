"""The CUDA prefills' block order (cuda_prefill.BLOCK_ORDER in the grid `cuda_prefill.grid` launches), compiled as host
C++ and walked in the order the GPU starts blocks (linear index): every (batch, query head, tile) exactly once, causal
tiles longest first across the heads of a section that keeps its K / V within the L2 budget, and the unmasked order
unchanged (one head's tiles side by side)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from ksearch.kernels.attention.cuda_prefill import BLOCK_ORDER, causal_section, grid

PROGRAM = r"""
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
using std::max; using std::min;
struct Dim { int x, y, z; };
static Dim blockIdx, gridDim;
template <bool CAUSAL> void order() {
    for (int lin = 0; lin < gridDim.x * gridDim.y * gridDim.z; ++lin) {
        blockIdx = {lin % gridDim.x, lin / gridDim.x % gridDim.y, lin / gridDim.x / gridDim.y};
""" + BLOCK_ORDER + r"""
        std::printf("%d %d\n", bhq, mt);
    }
}
int main(int argc, char** argv) {
    gridDim = {std::atoi(argv[1]), std::atoi(argv[2]), std::atoi(argv[3])};
    if (std::atoi(argv[4])) order<true>(); else order<false>();
}
"""


@pytest.fixture(scope="module")
def walker(tmp_path_factory: pytest.TempPathFactory) -> Path:
    cxx = shutil.which("g++") or shutil.which("clang++")
    if cxx is None:
        pytest.skip("no host C++ compiler")
    where = tmp_path_factory.mktemp("order")
    (where / "order.cpp").write_text(PROGRAM)
    subprocess.run([cxx, "-O1", "-o", str(where / "order"), str(where / "order.cpp")], check=True)
    return where / "order"


def walk(walker: Path, b: int, hq: int, hkv: int, s: int, tiles: int, causal: bool) -> list[tuple[int, int]]:
    threads = 128  # MLX's grid counts threads; the walk counts blocks
    gx, gy, gz = grid(b, hq, hkv, s, 128, 2, tiles, threads, causal)
    out = subprocess.run([str(walker), *map(str, (gx // threads, gy, gz, int(causal)))], capture_output=True,
                         text=True, check=True).stdout
    return [(int(a), int(b)) for a, b in (line.split() for line in out.splitlines())]


@pytest.mark.parametrize(("b", "hq", "hkv", "s", "rows"), [(1, 32, 8, 2048, 192), (1, 32, 8, 8192, 192),
                                                           (4, 32, 32, 8192, 128), (2, 6, 3, 640, 128)])
def test_causal_blocks_go_longest_first_across_the_heads_of_a_section(walker: Path, b: int, hq: int, hkv: int,
                                                                      s: int, rows: int) -> None:
    nt, nbh = -(-s // rows), b * hq
    seen = walk(walker, b, hq, hkv, s, nt, True)
    assert sorted(seen) == [(h, t) for h in range(nbh) for t in range(nt)]  # each block exactly once
    sec = causal_section(b, hq, hkv, s, 128, 2)
    assert sec % (hq // hkv) == 0 and nbh % sec == 0  # whole GQA groups, whole sections
    for first in range(0, nbh, sec):
        part = seen[first * nt:(first + min(sec, nbh - first)) * nt]
        assert {h for h, _ in part} == set(range(first, min(first + sec, nbh)))  # a section's blocks are contiguous
        assert [t for _, t in part] == sorted((t for _, t in part), reverse=True)  # longest first within it
    if sec < nbh:  # the L2 budget splits the heads: a section's K / V fits 24 MiB
        assert sec // (hq // hkv) * 2 * s * 128 * 2 <= 24 << 20


def test_unmasked_blocks_keep_one_heads_tiles_side_by_side(walker: Path) -> None:
    seen = walk(walker, 2, 32, 8, 2048, 11, False)
    assert seen == [(h, t) for h in range(64) for t in reversed(range(11))]


@pytest.mark.parametrize(("b", "hq", "hkv", "s", "sec"), [(1, 32, 8, 2048, 32), (1, 32, 8, 8192, 16),
                                                          (4, 32, 32, 8192, 4), (1, 32, 32, 65536, 1),
                                                          (3, 10, 2, 16384, 15)])
def test_a_section_is_the_most_heads_that_divide_the_grid_and_fit_l2(b: int, hq: int, hkv: int, s: int,
                                                                      sec: int) -> None:
    # 4 MiB of K / V a KV head at 8192 keys: 6 fit 24 MiB, but 24 query heads (GQA 4) do not divide 32: 16; at B 4
    # without GQA 6 fit, 4 divide 128; a KV head past the budget is still one section; 15 = 3 groups of 5 divides 30
    assert causal_section(b, hq, hkv, s, 128, 2) == sec
