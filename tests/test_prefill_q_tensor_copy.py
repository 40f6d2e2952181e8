"""Q by the producer's tensor copies in the persistent prefill (`_qt`): named and refused where it cannot apply, its
shared memory and launch (a second map input, three maps a block), the hand-over of Q between producer and consumers
run on a model of the two mbarriers with the parities and the copy's place taken from the kernel's text, the kernels
compiled for sm_90a, and the split kernel's main loop shorter with it (its SASS)."""

from __future__ import annotations

import json
import random
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from prefill_units import compiled_spills
from script_module import load_module

from ksearch.backends.nvcc import nvcc_path
from ksearch.kernels import device
from ksearch.kernels.attention import wgmma_ws as WS
from ksearch.kernels.attention.wgmma_ws_grid import kernel_io

SPLIT = "ws3_n64_s4_p4_tmas_pst_preg32_cr_wt_sn_hs_kt_uw_qt"  # the dispatch's WIDE_SPLIT_TAIL, Q by tensor copies
PERSIST = "ws3_n64_s4_p4_tmas_pst_preg32_cr_wt_sn_uw_qt"
SASS_SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks/prefill_sass.py"
SASS = load_module(SASS_SCRIPT)
TALL = "ws2_n128_s3_p4_tmas_pst_preg32_sn_qt"  # at 24 producer registers it spills 52 bytes


@pytest.mark.parametrize("name", [SPLIT, PERSIST, TALL])
def test_names_round_trip(name: str) -> None:
    cfg = WS.parse_config(name)
    assert cfg.qtma and WS.config_name(cfg) == name and WS.kernel_name(cfg).endswith("_qt")
    text = WS.source_text(cfg)
    assert "qfull" in text and "ks_load_core<D, 128, 64>(Qs" not in text.split("if (QNEXT")[0]
    assert "qfull" not in WS.source_text(WS.parse_config(name.replace("_qt", "")))
    assert not WS.with_bulk_copies(cfg).qtma and ("qmap", "uint64") in kernel_io(cfg)[0]


@pytest.mark.parametrize("name", ["ws3_n64_s4_p4_tmas_cr_qt", "ws3_n64_s4_p4_tma_pst_qt", "ws3_n64_s4_p4_tmas_pst_qn_qt",
                                  "ws3_n64_s4_p4_tmas_pst_ob_qt"])
def test_where_it_cannot_apply_it_is_refused_in_one_line(name: str) -> None:
    with pytest.raises(ValueError, match="_qt .* persistent blocks") as err:
        WS.parse_config(name)
    assert "\n" not in str(err.value)


def test_q_moves_to_byte_1024_and_a_third_map_fits_at_d128() -> None:
    for name in (SPLIT, TALL):
        cfg = WS.parse_config(name)
        plain = WS.parse_config(name.replace("_qt", ""))
        assert cfg.smem_bytes(128) - plain.smem_bytes(128) == 768 + 16 + 128  # Q's offset, two mbarriers, a map
        assert WS.smem_problem(cfg, 128) is None and WS.smem_problem(cfg, 64) is None


def test_the_launch_passes_q_s_map_and_keeps_three_maps_a_block(monkeypatch: pytest.MonkeyPatch) -> None:
    mx = pytest.importorskip("mlx.core")
    built: list[tuple[Any, ...]] = []
    maps: list[tuple[Any, ...]] = []
    monkeypatch.setattr(WS, "build_kernel", lambda *a: built.append(a) or "kernel")
    monkeypatch.setattr(WS, "map_input", lambda *a, **k: maps.append((a, k)) or f"map{len(maps)}")
    monkeypatch.setattr(device, "cuda_sm_count", lambda: 132)
    WS._tma_launch.cache_clear()
    try:
        _, inputs, kw, _ = WS._tma_launch((2, 32, 2048, 128), (2, 8, 2048, 128), mx.float16, False,
                                          WS.parse_config(PERSIST))
    finally:
        WS._tma_launch.cache_clear()
    assert inputs == ("map1", "map2") and built[0][4][:2] == ("tmap", "qmap")
    # K's map by K's shape and 64-key boxes; Q's by Q's shape, 64 rows x 64 columns a box, both swizzled
    assert maps[0] == (WS.tma_geometry((2, 8, 2048, 128), 64, 3), {"swizzle": 3})
    assert maps[1] == (WS.tma_geometry((2, 32, 2048, 128), 64, 3), {"swizzle": 3})
    assert kw["output_shapes"][1] == (132 * 48 + 16,)  # three 128-byte maps a block


def _hand_over_rules() -> tuple[str, str, str]:
    """(the producer's parity on `qempty`, the consumers' on `qfull`, the tile at which the producer copies Q), as C
    expressions of `qi`, `STAGES` and `ntiles`, from the kernel's text."""
    text = WS.source_text(WS.parse_config(SPLIT))
    producer = re.search(r"ks_mbar_wait\(qempty, (.*?)\);", text)
    consumer = re.search(r"ks_mbar_wait\(qfull, (.*?)\);", text)
    at = re.search(r"if \(t == (\(qi == 0 \? 0 : .*?\))\) \{  // `_qt`", text)
    assert producer and consumer and at, "the hand-over's pieces moved in the kernel text"
    return producer[1], consumer[1], at[1]


def _c(expr: str, **env: int) -> int:
    """A C integer expression of the hand-over as Python: `a ? b : c` and `min`."""
    py = re.sub(r"\((.+?) \? (.+?) : (.+)\)", r"((\2) if (\1) else (\3))", expr)
    return int(eval(py, {"min": min}, dict(env)))  # noqa: S307 - the kernel's own expression


class Barrier:
    """An mbarrier: a phase completes when its expected arrivals are in; a wait on parity p passes once the phase of
    that parity has completed (the current phase's parity differs from p), as `mbarrier.try_wait.parity`."""

    def __init__(self, count: int) -> None:
        self.count, self.arrived, self.phase = count, 0, 0

    def arrive(self) -> None:
        self.arrived += 1
        if self.arrived == self.count:
            self.arrived, self.phase = 0, self.phase + 1

    def passes(self, parity: int) -> bool:
        return (self.phase & 1) != parity


class HandOver:
    """The producer and the consumer warps of one persistent block on a model of their mbarriers: K / V stages (a
    tile of running count g may be copied once every warp released tile g - STAGES) and Q's two barriers, with the
    parities and the copy's place (`rules`: _hand_over_rules) as the kernel has them."""

    def __init__(self, rules: tuple[str, str, str], tiles: list[int], warps: int, stages: int) -> None:
        self.wait_empty, self.wait_full, self.copy_at = rules
        self.tiles, self.warps, self.stages = tiles, warps, stages
        self.qfull, self.qempty = Barrier(1), Barrier(warps)
        self.holds: int | None = None  # the item whose Q the buffer holds (a landed copy)
        self.in_flight: list[int] = []  # Q copies issued, not landed
        self.issued = 0  # K / V tiles the producer issued, running count
        self.item, self.t, self.copied = 0, 0, -1  # the producer's place
        self.released = [0] * warps  # K / V tiles each warp released, running count
        self.at = [[0, 0, False] for _ in range(warps)]  # each warp: item, tile, whether it holds Q (passed its wait)

    def producer(self) -> bool:
        i, t = self.item, self.t
        if i == len(self.tiles):
            return False
        if self.copied < i and t == _c(self.copy_at, qi=i, STAGES=self.stages, ntiles=self.tiles[i]):
            if i > 0 and not self.qempty.passes(_c(self.wait_empty, qi=i)):
                return False
            reading = [w for w, (wi, _, holds) in enumerate(self.at) if holds]
            assert not reading, f"item {i}'s Q copied while warps {reading} read item {i - 1}'s"
            self.in_flight.append(i)
            self.copied = i
            return True
        if self.issued >= self.stages and min(self.released) < self.issued - self.stages + 1:
            return False  # the stage's earlier tile not released by every warp
        self.issued += 1
        self.item, self.t = (i + 1, 0) if t + 1 == self.tiles[i] else (i, t + 1)
        return True

    def land(self) -> bool:
        if not self.in_flight:
            return False
        self.holds = self.in_flight.pop(0)
        self.qfull.arrive()  # the expected bytes are in
        return True

    def consumer(self, w: int) -> bool:
        i, t, holds = self.at[w]
        if i == len(self.tiles):
            return False
        if not holds:
            if not self.qfull.passes(_c(self.wait_full, qi=i)):
                return False
            assert self.holds == i, f"warp {w} passed its wait for item {i} with item {self.holds}'s Q in the buffer"
            self.at[w][2] = True
            return True
        if t < self.tiles[i]:  # a tile: once issued, its products, then released
            if self.issued <= self.released[w]:
                return False
            self.released[w] += 1
            self.at[w][1] = t + 1
            return True
        self.qempty.arrive()  # its last product of the item is done
        self.at[w] = [i + 1, 0, False]
        return True

    def run(self, rng: random.Random) -> bool:
        agents = [self.producer, self.land, *[(lambda w=w: self.consumer(w)) for w in range(self.warps)]]
        while True:
            rng.shuffle(agents)
            if not any(agent() for agent in agents):
                return self.item == len(self.tiles) and all(a[0] == len(self.tiles) for a in self.at)


@pytest.mark.parametrize("seed", range(16))
def test_the_hand_over_gives_each_item_its_own_q_and_never_overwrites_one_in_use(seed: int) -> None:
    rng = random.Random(seed)
    tiles = [rng.choice([1, 2, 3, 5, 21, 64]) for _ in range(8)]  # short causal items and split parts too
    assert HandOver(_hand_over_rules(), tiles, warps=12, stages=4).run(rng), "the hand-over deadlocked"


@pytest.mark.parametrize(("rules", "what"), [
    (("qi & 1", "qi & 1", None), "copied while"),  # the producer's parity one item late
    ((None, None, "(qi == 0 ? 0 : ntiles - 1)"), "deadlocked"),  # Q copied after a stage this item still needs
])
def test_the_model_catches_a_wrong_parity_and_a_copy_too_late(rules: tuple[str | None, ...], what: str) -> None:
    real = _hand_over_rules()
    broken = tuple(r if r is not None else k for r, k in zip(rules, real, strict=True))
    found = []
    for seed in range(16):
        rng = random.Random(seed)
        tiles = [rng.choice([1, 2, 3, 5, 21, 64]) for _ in range(8)]
        try:
            if not HandOver(broken, tiles, warps=12, stages=4).run(rng):  # type: ignore[arg-type]
                found.append("deadlocked")
        except AssertionError as exc:
            found.append(str(exc))
    assert any(what in f for f in found), found


@pytest.mark.skipif(nvcc_path() is None, reason="LOUD SKIP: nvcc not installed")
def test_it_compiles_for_sm_90a_without_serialised_wgmma_or_spills_at_d128_with_the_mask() -> None:
    spills = compiled_spills("qt", ((SPLIT, 128, False), (SPLIT, 128, True), (PERSIST, 128, False), (TALL, 64, True)))
    # the split kernel spills 32 bytes without the mask without `_qt`
    assert spills["qt0"] <= 32 and spills["qt1"] == spills["qt2"] == spills["qt3"] == 0, spills


@pytest.mark.skipif(SASS.tool("cuobjdump") is None or SASS.tool("nvdisasm") is None or nvcc_path() is None,
                    reason="LOUD SKIP: no nvcc, cuobjdump or nvdisasm: the main loop is not read")
def test_its_main_loop_is_shorter_than_the_split_kernels(tmp_path: Path) -> None:
    out = tmp_path / "sass.json"
    subprocess.run([sys.executable, str(SASS_SCRIPT), SPLIT, SPLIT.replace("_qt", ""), "--shapes", "128",
                    "--json", str(out)], check=True, capture_output=True, timeout=600)
    rows = {r["config"]: r for r in json.loads(out.read_text())["rows"]}
    with_qt, without = rows[SPLIT], rows[SPLIT.replace("_qt", "")]
    assert with_qt["hgmma"] == without["hgmma"] == 32 and with_qt["local"] == 0
    assert with_qt["main_loop"] < without["main_loop"], (with_qt, without)


def test_q_is_copied_and_read_as_a_64_key_k_tile_is() -> None:
    """Q's box, swizzle, descriptor and column offsets are those of a K tile of 64 keys, the layout the H200's checks
    passed for K since the swizzled copies (KV_LAYOUT 2)."""
    q_shape, k_shape = (2, 32, 2048, 128), (2, 8, 2048, 128)
    assert WS.tma_geometry(q_shape, 64, 3)[2] == WS.tma_geometry(k_shape, 64, 3)[2] == (64, 64, 1)
    text = WS.source_text(WS.parse_config(SPLIT))
    assert "ks_desc(Qs + wg * 64 * D, 16, 1024) | kv_swizzle" in text
    assert "KL[3] = {128, BN * 16, 16}, KS[3] = {(D / 8) * 128, 128, 1024}" in text  # K's lead 16, stride 1024
    q_off = re.search(r"auto q_off = \[\]\(int kc\) \{ return (.*?); \};", text)
    k_off = re.search(r"return KV_LAYOUT == 2 \? (.*?) :", text)
    assert q_off and k_off
    for kc in range(8):
        assert eval(q_off[1], {"kc": kc}) == eval(k_off[1], {"kc": kc, "BN": 64})  # noqa: S307
    # the box lands at a multiple of 1024 bytes (the swizzle's atom) for every warpgroup and 64 columns
    assert "T* Qs = ones + 512;" in text and (64 * 128 * 2) % 1024 == 0 and (64 * 64 * 2) % 1024 == 0
