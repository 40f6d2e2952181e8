"""Each consumer warpgroup only the tiles its own rows need (`_wt`): named and refused where it cannot apply, its
hand-over run on a model of the stages' mbarriers under random interleavings (with the two ways of getting it wrong
shown to fail there), the kernel text in that order, the kernel's own tile count against the tiles its rows see, the
tile counts of the estimate, and the kernels compiled for sm_90a."""

from __future__ import annotations

import random
from collections.abc import Iterator

import pytest
from prefill_units import tensor_copy_unit
from script_module import load_script

from ksearch.backends.nvcc import compile_check, nvcc_path
from ksearch.kernels import tensor_map
from ksearch.kernels.attention import wgmma_ws as WS
from ksearch.kernels.attention import wgmma_ws_text as TXT
from ksearch.kernels.cuda_headers import WGMMA_HEADER
from ksearch.knowledge.resources import parse_ptxas

TILES = load_script("benchmarks/prefill_tile_count.py")


@pytest.mark.parametrize("name", ["ws3_n64_s4_p4_tmas_cr_wt", "ws3_n64_s4_p4_tmas_pst_preg32_cr_wt",
                                  "ws3_n64_s4_p4_bulk_wt", "ws2_n64_s3_p1_wt_ca"])
def test_names_round_trip(name: str) -> None:
    cfg = WS.parse_config(name)
    assert cfg.own_tiles and WS.config_name(cfg) == name and WS.kernel_name(cfg).endswith("_wt")
    assert "ctiles" in WS.source_text(cfg) and "ctiles" not in WS.source_text(WS.parse_config(name.replace("_wt", "")))


@pytest.mark.parametrize("name", ["ws3_n64_s4_p0_wt", "ws2_n128_s3_p4_tmas_pp_wt"])
def test_without_a_producer_or_with_ping_pong_it_is_refused_in_one_line(name: str) -> None:
    with pytest.raises(ValueError, match="_wt .* needs a producer .* no ping-pong") as err:
        WS.parse_config(name)
    assert "\n" not in str(err.value)


# -- the hand-over on a model of the mbarriers ---------------------------------------------------------------------
# An mbarrier completes its phase when its count of arrivals is reached; a wait on parity p passes once the phase of
# that parity has completed (PTX's try_wait.parity). The producer fills stage gt % STAGES with tile gt once every
# consumer handed back tile gt - STAGES; consumers wait on "full", read, and arrive on "empty", in the kernel's order.


class Barrier:
    def __init__(self, count: int) -> None:
        self.count, self.pending, self.phase = count, count, 0

    def arrive(self) -> None:
        self.pending -= 1
        if self.pending == 0:
            self.phase, self.pending = self.phase + 1, self.count

    def passed(self, parity: int) -> bool:
        return (self.phase & 1) != parity


Step = tuple[str, object]  # ("wait", (barrier, parity)) or ("do", callable)


def simulate(items: list[tuple[int, list[int]]], stages: int, persistent: bool, seed: int,
             drain_waits: bool = True, last_v: bool = True) -> str:
    """Run the producer and the consumer warpgroups on `items` ((ntiles, each warpgroup's ctiles) a work item, one
    block) in a random interleaving; "ok", "deadlock" or what went wrong."""
    wgs = len(items[0][1])
    kfull, vfull = [Barrier(1) for _ in range(stages)], [Barrier(1) for _ in range(stages)]
    kempty, vempty = [Barrier(wgs) for _ in range(stages)], [Barrier(wgs) for _ in range(stages)]
    kstage: list[object] = [None] * stages
    vstage: list[object] = [None] * stages
    errors: list[str] = []

    def producer() -> Iterator[Step]:
        g0 = 0
        for i, (ntiles, _) in enumerate(items):
            for t in range(ntiles):
                gt = g0 + t
                st, ph = gt % stages, (gt // stages) & 1
                for empty, full, held in ((kempty, kfull, kstage), (vempty, vfull, vstage)):
                    if gt >= stages:
                        yield "wait", (empty[st], ph ^ 1)
                    yield "do", (lambda held=held, full=full, st=st, tile=(i, t): (held.__setitem__(st, tile),
                                                                                     full[st].arrive()))
            g0 += ntiles

    def wait_full(w: int, full: list[Barrier], held: list[object], gt: int, tile: tuple[int, int]) -> Iterator[Step]:
        yield "wait", (full[gt % stages], (gt // stages) & 1)
        yield "do", (lambda: errors.append(f"wg {w} read {held[gt % stages]} for {tile}")
                     if held[gt % stages] != tile else None)

    def release(w: int, empty: list[Barrier], held: list[object], gt: int, tile: tuple[int, int],
                check: bool = True) -> Step:
        def arrive() -> None:  # the stage still holds the tile the warpgroup used until it hands it back
            if check and held[gt % stages] != tile:
                errors.append(f"wg {w}: tile {tile} overwritten before it was handed back")
            empty[gt % stages].arrive()
        return "do", arrive

    def consumer(w: int) -> Iterator[Step]:
        g0 = 0
        for i, (ntiles, counts) in enumerate(items):
            c = counts[w]
            # the pipeline: first / after_s0, then step t (K(t), V(t - 1)), last, end
            yield from wait_full(w, kfull, kstage, g0, (i, 0))
            yield release(w, kempty, kstage, g0, (i, 0))
            for t in range(1, c):
                yield from wait_full(w, kfull, kstage, g0 + t, (i, t))
                yield from wait_full(w, vfull, vstage, g0 + t - 1, (i, t - 1))
                yield release(w, kempty, kstage, g0 + t, (i, t))
                yield release(w, vempty, vstage, g0 + t - 1, (i, t - 1))
            yield from wait_full(w, vfull, vstage, g0 + c - 1, (i, c - 1))
            if persistent or (c < ntiles and last_v):
                yield release(w, vempty, vstage, g0 + c - 1, (i, c - 1))
            for t in range(c, ntiles):  # the drain; unwaited, a stage may not hold the tile yet
                if drain_waits:
                    yield from wait_full(w, kfull, kstage, g0 + t, (i, t))
                yield release(w, kempty, kstage, g0 + t, (i, t), check=drain_waits)
                if drain_waits:
                    yield from wait_full(w, vfull, vstage, g0 + t, (i, t))
                yield release(w, vempty, vstage, g0 + t, (i, t), check=drain_waits)
            g0 += ntiles

    rng = random.Random(seed)
    procs = [producer(), *(consumer(w) for w in range(wgs))]
    nxt: list[Step | None] = [next(p, None) for p in procs]
    while any(s is not None for s in nxt):
        ready = [j for j, s in enumerate(nxt) if s is not None and (s[0] == "do" or s[1][0].passed(s[1][1]))]
        if not ready:
            return "deadlock"
        j = rng.choice(ready)
        step = nxt[j]
        assert step is not None
        if step[0] == "do":
            step[1]()
        nxt[j] = next(procs[j], None)
        if errors:
            return errors[0]
    return "ok"


def causal_counts(length: int, m0: int, wg: int = 3) -> tuple[int, list[int]]:
    """(ntiles, each warpgroup's ctiles) of the causal block at row m0, L = S, 64 keys a tile, as the kernel
    computes them."""
    ntiles = -(-min(length, m0 + 64 * wg) // 64)
    return ntiles, [1 if m0 + 64 * w >= length else min(ntiles, m0 // 64 + w + 1) for w in range(wg)]


# blocks of three warpgroups: the causal diagonal (2 and 1 tiles short), a partial last block (warpgroups past L run
# one tile of 19, 10 or 14), and for the persistent block items of every kind one after another
BLOCKS = [causal_counts(576, 384), causal_counts(1216, 1152), (10, [1, 1, 10]), (14, [14, 1, 1]), (5, [3, 4, 5]),
          (1, [1, 1, 1])]


@pytest.mark.parametrize("persistent", [False, True])
def test_the_hand_over_finishes_and_every_tile_is_read_whole_in_every_interleaving(persistent: bool) -> None:
    runs = [[b] for b in BLOCKS] if not persistent else [BLOCKS, BLOCKS[::-1], BLOCKS[2:4] * 3]
    for items in runs:
        for seed in range(150):
            assert simulate(items, 4, persistent, seed) == "ok", (items, seed)
        for stages in (2, 3):
            assert simulate(items, stages, persistent, 7) == "ok", (items, stages)


def test_arriving_on_empty_without_waiting_on_full_breaks_a_phase() -> None:
    outcomes = {simulate([(10, [1, 10, 10]), (10, [10, 10, 10])], 4, True, seed, drain_waits=False)
                for seed in range(200)}
    # another warpgroup finds its tile overwritten, or reads the wrong one: the early arrivals completed its phase
    assert any(o.startswith(("wg 1", "wg 2")) for o in outcomes), outcomes


def test_one_block_an_item_must_hand_back_its_last_v_stage() -> None:
    assert simulate([(10, [1, 10, 10])], 4, False, 0, last_v=False) == "deadlock"
    assert simulate([(10, [1, 10, 10])], 4, False, 0) == "ok"


def test_the_kernel_text_keeps_the_models_order() -> None:
    for name, persistent in (("ws3_n64_s4_p4_tmas_cr_wt", False), ("ws3_n64_s4_p4_tmas_pst_preg32_cr_wt", True)):
        text = WS.source_text(WS.parse_config(name))
        count = text.index("const int ctiles")
        assert count < text.index("wait_full(kfull, 0);") < text.index("for (int t0 = 1; t0 < ctiles; t0 += 2)")
        drain = text.index("for (int t = ctiles; t < ntiles; ++t)")
        body = text[drain:text.index("}", drain)]
        assert [body.index(s) for s in ("wait_full(kfull, t);", "release(kempty, t);", "wait_full(vfull, t);",
                                        "release(vempty, t);")] == sorted(body.index(s) for s in (
                                            "wait_full(kfull, t);", "release(kempty, t);", "wait_full(vfull, t);",
                                            "release(vempty, t);"))
        assert text.index("issue_pv(ctiles - 1, pa[0]);") < text.index(TXT.EPILOGUE) < drain
        last_v = "if (ctiles < ntiles) release(vempty, ctiles - 1);"
        assert (("release(vempty, ctiles - 1);" in text and last_v not in text) if persistent
                else text.index(last_v) < drain)
        if persistent:  # the running tile count still moves by the item's tiles, the producer's count
            assert drain < text.index("g0 += ntiles;\n    }")
        # the producer still copies every tile of the block
        assert "for (int t = 0; t < ntiles; ++t) {" in text[:text.index("const int ctiles")]
        # the count broadcast from lane 0, so that ptxas keeps the loop on the uniform datapath
        assert "__shfl_sync(0xffffffffu, wg, 0)" in text[count - 200:count]


def test_the_tile_counts_match_the_models_blocks_and_the_documented_shares(capsys: pytest.CaptureFixture[str]) -> None:
    assert causal_counts(576, 384) == (9, [7, 8, 9]) and causal_counts(1216, 1152) == (19, [19, 1, 1])
    # the script's counts are the model's blocks summed: L=576 with the mask, blocks at rows 0 and 192, 384
    model = [causal_counts(576, m0) for m0 in (0, 192, 384)]
    assert TILES.tile_products(576, 576, True, 3, 64) == (sum(3 * n for n, _ in model), sum(sum(c) for _, c in model))
    # L=4096 with the mask: 2,271 warpgroup-tiles visited, 2,082 needed (8.3% fewer); 128-key tiles lose none
    assert TILES.tile_products(4096, 4096, True, 3, 64) == (2271, 2082)
    assert TILES.tile_products(4096, 4096, False, 3, 64) == (4224, 4098)
    assert len(set(TILES.tile_products(4096, 4096, True, 2, 128))) == 1
    assert TILES.main(["--lengths", "4096"]) == 0
    assert "8.3% saved" in capsys.readouterr().out
    with pytest.raises(SystemExit, match="multiple of 64"):
        TILES.main(["--lengths", "100"])


@pytest.mark.skipif(nvcc_path() is None, reason="nvcc not installed")
def test_it_compiles_for_sm_90a_without_spills() -> None:
    units = [tensor_copy_unit(f"wt{i}_0", WS.parse_config(name), 128, causal)
             for i, (name, causal) in enumerate((("ws3_n64_s4_p4_tmas_cr_wt", False),
                                                 ("ws3_n64_s4_p4_tmas_pst_preg32_cr_wt", True)))]
    ok, log = compile_check([WGMMA_HEADER, tensor_map.TMA_HEADER, *units])
    assert ok, log[-3000:]
    assert "C751" not in log, "wgmma serialised"  # C7510-C7515: every wgmma of the kernel serialised
    spills = [k.spill_store_bytes for k in parse_ptxas(log)]
    assert len(spills) == 2 and max(spills) == 0, log[-3000:]


def kernel_ctiles() -> str:
    """The kernel text's tile count for a warpgroup, as a Python expression of m0, wg, L, S, shift, ntiles, BN and
    CAUSAL (the lane-0 broadcast of wg taken as wg)."""
    text = WS.source_text(WS.parse_config("ws3_n64_s4_p4_tmas_cr_wt"))
    wrow = text[text.index("const int wrow = ") + len("const int wrow = "):]
    wrow = wrow[:wrow.index(";")].replace("__shfl_sync(0xffffffffu, wg, 0)", "wg")
    count = text[text.index("const int ctiles = ") + len("const int ctiles = "):]
    count = count[:count.index(";")].replace("wrow", f"({wrow})")
    # C's `a ? b : c ? d : e` and integer division, in Python
    cond, rest = count.split(" ? ", 1)
    one, rest = rest.split(" : ", 1)
    cond2, rest = rest.split(" ? ", 1)
    causal_count, plain = rest.rsplit(" : ", 1)
    py = f"({one}) if ({cond}) else (({causal_count}) if ({cond2}) else ({plain}))"
    return py.replace(" / ", " // ")


@pytest.mark.parametrize("causal", [False, True])
def test_the_kernels_count_is_every_tile_with_a_key_its_rows_see_and_no_more(causal: bool) -> None:
    expr = kernel_ctiles()
    wg_count, bn = 3, 64
    for length in (64, 192, 256, 576, 1216, 2240):
        for keys in ([length, length + 64, length + 320] if causal else [length, 128, 4096]):
            shift = keys - length
            for m0 in range(0, length, 64 * wg_count):
                n_end = min(keys, m0 + 64 * wg_count + shift) if causal else keys
                ntiles = -(-n_end // bn)
                for wg in range(wg_count):
                    env = {"m0": m0, "wg": wg, "L": length, "S": keys, "shift": shift, "ntiles": ntiles, "BN": bn,
                           "CAUSAL": causal, "min": min}
                    got = eval(expr, env)  # noqa: S307 - the kernel's own formula
                    rows = range(m0 + 64 * wg, min(length, m0 + 64 * wg + 64))
                    seen = [t for t in range(ntiles) if any(  # a tile with a key some row of the warpgroup sees
                        min(keys, r + shift + 1 if causal else keys) > t * bn for r in rows)]
                    assert got == (len(seen) if rows else 1), (length, keys, m0, wg, got, len(seen))
                    assert seen == list(range(len(seen)))  # the tiles it needs are the first ones


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize(("length", "keys", "bk"), [(96, 96, 16), (64, 160, 32), (256, 256, 16), (40, 72, 32)])
def test_the_metal_column_count_is_every_column_with_a_key_its_simdgroups_rows_see(
        causal: bool, length: int, keys: int, bk: int) -> None:
    """The Metal simdgroup prefill's counterpart: its key blocks end at the block's last visible key (`kend` in the
    kernel text), each simdgroup of 8 rows multiplies every 8-key column of them; the count of columns needed, by
    brute force over rows and keys, with S > L and a partial last block."""
    from ksearch.kernels.attention import metal_simdgroup as MS
    assert "const int kend = CAUSAL ? min(S, q0 + BQ + off) : S;" in MS.SOURCE
    assert "for (int k0 = 0; k0 < kend; k0 += BK)" in MS.SOURCE and "constexpr int BQ = 32;" in MS.SOURCE
    shift, visited, needed = keys - length, 0, 0
    for q0 in range(0, length, MS.BQ):
        kend = min(keys, q0 + MS.BQ + shift) if causal else keys
        for row0 in range(q0, q0 + MS.BQ, 8):
            for col in range(0, -(-kend // bk) * bk, 8):
                visited += 1
                needed += any(j < keys and (not causal or j <= i + shift)
                              for i in range(row0, min(row0 + 8, length)) for j in range(col, col + 8))
    assert TILES.metal_column_products(length, keys, causal, bk) == (visited, needed)


def test_the_metal_count_is_a_small_share_and_refuses_wgmma_names(capsys: pytest.CaptureFixture[str]) -> None:
    # with the mask at L=4096: 0.6% of the columns hold no key a simdgroup's rows see; without it none
    assert TILES.metal_column_products(4096, 4096, True, 16) == (132096, 131328)
    assert TILES.main(["--metal", "--lengths", "4096"]) == 0
    out = capsys.readouterr().out
    assert "metal_simdgroup_d128_bk16" in out and "0.6% saved" in out and "0.0% saved" in out
    with pytest.raises(SystemExit, match="without CONFIG names"):
        TILES.main(["--metal", "ws3_n64_s4_p4_tmas_cr"])
