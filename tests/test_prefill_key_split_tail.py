"""The persistent prefill's last round split along the keys (`_kt`): named and refused where it cannot apply; the
kernel's own preamble and item mapping (taken from its text and run here) splitting exactly the last round, each
part a contiguous share of the key tiles, the parts within one round of the grid, as the host sizes its buffers;
zeroed counters of each launch's own; the dispatch's choice; compiled for sm_90a; `bench attention --calls`."""

from __future__ import annotations

import re
import subprocess
import sys
from types import SimpleNamespace

import pytest
from prefill_units import tensor_copy_unit

from ksearch.backends.nvcc import compile_check, nvcc_path
from ksearch.kernels import device, tensor_map
from ksearch.kernels.attention import wgmma_ws as WS
from ksearch.kernels.attention import wgmma_ws_grid as GRID
from ksearch.kernels.attention import wgmma_ws_tail as KT
from ksearch.kernels.cuda_headers import WGMMA_HEADER
from ksearch.knowledge.resources import parse_ptxas

NAME = "ws3_n64_s4_p4_tmas_pst_preg32_cr_wt_sn_hs_kt_uw"


def test_the_name_round_trips_and_bulk_copies_drop_it() -> None:
    cfg = WS.parse_config(NAME)
    assert cfg.ktail and cfg.sections and WS.config_name(cfg) == NAME and "_kt" in WS.kernel_name(cfg)
    assert "VITEMS" in WS.source_text(cfg) and "VITEMS" not in WS.source_text(WS.parse_config(NAME.replace("_kt", "")))
    assert not WS.with_bulk_copies(cfg).ktail
    ins, outs = GRID.kernel_io(cfg)
    assert ins[-1] == ("counts", "uint32") and outs[-1] == ("part", "float32")


@pytest.mark.parametrize("name", ["ws3_n64_s4_p4_tmas_cr_kt", "ws3_n64_s4_p4_tmas_pst_qn_kt",
                                  "ws3_n64_s4_p4_tmas_pst_qp_kt", "ws3_n64_s4_p4_tmas_pst_st4_kt",
                                  "ws3_n64_s4_p4_tmas_pst_ob_kt"])
def test_where_it_cannot_apply_it_is_refused_in_one_line(name: str) -> None:
    with pytest.raises(ValueError, match="_kt .* persistent blocks") as err:
        WS.parse_config(name)
    assert "\n" not in str(err.value)


def _as_python(expr: str) -> str:
    """A C integer expression of the kernel's as Python: casts dropped, division floored (every operand here is
    non-negative), `a ? b : c` and the logical operators spelled as Python's."""
    py = expr.replace("(int)", "").replace("gridDim.x", "grid").replace(" / ", " // ")
    py = py.replace("&&", "and").replace("||", "or").replace("true", "True").replace("false", "False")
    while "?" in py:  # innermost-last is enough here: each expression has one conditional
        cond, rest = py.split("?", 1)
        then, other = rest.split(":", 1)
        py = f"(({then.strip()}) if ({cond.strip()}) else ({other.strip()}))"
    return py


def _statements(block: str) -> list[tuple[str, str]]:
    """`const int a = X, b = Y;` lines -> [(a, X), (b, Y)] (a `const bool` too)."""
    out = []
    for line in block.strip().splitlines():
        line = line.split("//")[0].strip().removesuffix(";")
        if not line.startswith("const"):
            continue
        body = re.sub(r"^const (int|bool) ", "", line)
        for part in re.split(r", (?=\w+ = )", body):
            name, expr = part.split(" = ", 1)
            out.append((name, _as_python(expr)))
    return out


def kernel_formula() -> tuple[list[tuple[str, str]], list[tuple[str, str]], list[tuple[str, str]]]:
    """(the preamble's statements, the item loop's mapping, a part's key tiles), from the kernel's own text."""
    text = WS.source_text(WS.parse_config(NAME))
    pre = re.search(r"const int KT_FULL = .*?const int VITEMS = .*?;\n", text, re.S)
    loop = re.search(r"const bool kt_part = .*?const int item = .*?;\n", text, re.S)
    tiles = re.search(r"const int t_lo = .*?const int ntiles = .*?;\n", text, re.S)
    assert pre and loop and tiles
    return _statements(pre[0]), _statements(loop[0]), _statements(tiles[0])


def _run(statements: list[tuple[str, str]], env: dict) -> dict:
    for name, expr in statements:
        env[name] = eval(expr, env)  # noqa: S307 - the kernel's own formula
    return env


@pytest.mark.parametrize(("items", "grid", "key_tiles", "causal", "parts"),
                         [(704, 132, 64, False, 3), (1376, 132, 128, False, 2), (2816, 132, 64, False, 3),
                          (5504, 132, 128, False, 1), (704, 132, 64, True, 1), (160, 132, 30, False, 4),
                          (133, 132, 2, False, 2), (264, 132, 64, False, 1), (5, 5, 8, False, 1),
                          (352, 132, 32, False, 1), (1408, 132, 32, False, 1)])
def test_the_kernel_splits_the_last_round_and_every_key_tile_once(items: int, grid: int, key_tiles: int,
                                                                  causal: bool, parts: int) -> None:
    pre, loop, tiles = kernel_formula()
    env = _run(pre, {"ITEMS": items, "grid": grid, "CAUSAL": causal, "k_shape": (1, 1, key_tiles * 64, 128),
                     "BN": 64, "min": min})
    assert (env["KT_FULL"], env["KT_TAIL"], env["KT"]) == KT.tail_parts(items, grid, key_tiles, causal)
    assert env["KT"] == parts and env["VITEMS"] - env["KT_FULL"] <= grid  # the parts take one round at most
    covered: dict[int, list[tuple[int, int]]] = {}
    for vitem in range(env["VITEMS"]):
        e = _run(loop, {**env, "vitem": vitem})
        t = _run(tiles, {"kpart": e["kpart"], "kparts": e["kparts"], "n_end": key_tiles * 64, "BN": 64})
        covered.setdefault(e["item"], []).append((t["t_lo"], t["ntiles"]))
        assert t["ntiles"] >= 1
    assert sorted(covered) == list(range(items))  # every item, and nothing else
    for item, spans in covered.items():
        spans.sort()
        assert spans[0][0] == 0 and sum(n for _, n in spans) == key_tiles  # its key tiles, each once, in order
        assert all(a + n == b for (a, n), (b, _) in zip(spans, spans[1:], strict=False))
        assert len(spans) == (parts if item >= env["KT_FULL"] else 1)


def test_the_host_sizes_the_records_and_the_counters_the_kernel_indexes() -> None:
    # B 1, Hq 32, L=4096 at D=128 on 132 SMs: 44 last-round items in 3 parts, 3 warpgroups of 4 warps
    assert KT.counter_count(704, 132, 3) == 44 * 3 * 4
    assert KT.scratch_floats(704, 132, 64, False, 3, 128) == 44 * 3 * 3 * 4 * 32 * (64 + 4)
    assert KT.scratch_floats(704, 132, 64, True, 3, 128) == 4 and KT.counter_count(264, 132, 3) == 1


def test_every_launch_counts_on_zeroed_counters_of_its_own() -> None:
    mx = pytest.importorskip("mlx.core")
    first, second = KT.fresh_counters(6), KT.fresh_counters(6)
    assert first is not second  # a kept buffer would be shared by launches MLX may run side by side
    assert first.dtype == mx.uint32 and first.shape == (6,) and not mx.any(first).item()


def test_the_launch_adds_the_counters_and_the_records_only_with_kt(monkeypatch: pytest.MonkeyPatch) -> None:
    mx = pytest.importorskip("mlx.core")
    monkeypatch.setattr(device, "cuda_sm_count", lambda: 132)
    cfg = WS.parse_config(NAME)
    names, counters, outs = GRID.extra_io((1, 32, 4096, 128), (1, 8, 4096, 128), False, cfg, 132)
    assert names == (("counts",), ("part",)) and counters == 44 * 12  # a counter a warp of each last-round item
    assert outs == (((KT.scratch_floats(704, 132, 64, False, 3, 128),), mx.float32),)
    assert GRID.extra_io((1, 32, 4096, 128), (1, 8, 4096, 128), False, WS.parse_config(NAME.replace("_kt", "")),
                       132) == (((), ()), 0, ())


def test_the_dispatch_splits_where_the_last_round_is_at_most_half_the_grid(monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib

    mx = pytest.importorskip("mlx.core")
    A = importlib.import_module("ksearch.kernels.attention")
    monkeypatch.delenv("KSEARCH_WGMMA_CONFIG", raising=False)
    monkeypatch.setattr(WS, "tma_ready", lambda *_a: True)
    monkeypatch.setattr(device, "cuda_sm_count", lambda: 132)

    def choose(b: int, hkv: int, length: int, d: int, causal: bool) -> object:
        q = SimpleNamespace(shape=(b, 32, length, d), dtype=mx.float16)
        k = SimpleNamespace(shape=(b, hkv, length, d), dtype=mx.float16)
        return A.wgmma_config(q, k, causal)

    assert WS.config_name(A.WIDE_SPLIT_TAIL) == NAME + "_r1_xa"
    assert choose(1, 8, 4096, 128, False) == choose(4, 32, 4096, 128, False) == A.WIDE_SPLIT_TAIL  # 44 of 132
    assert choose(1, 32, 8192, 128, False) == A.WIDE_SPLIT_TAIL  # 56 items left: two parts each
    assert choose(1, 8, 4096, 128, True) == A.WIDE_PERSIST  # under the mask nothing splits
    assert choose(4, 8, 8192, 128, False) == A.WIDE_PERSIST  # 92 items left: no room for a second part
    assert choose(1, 8, 2048, 128, False) == A.WIDE_PERSIST  # 88 left: three parts over two rounds measured slower
    assert choose(4, 32, 8192, 128, True) == A.WIDE_SECTIONS  # 128 K / V heads, four sections of 33
    assert choose(4, 32, 4096, 64, False) == A.TALL_SECTIONS and choose(1, 32, 4096, 64, False) == A.TALL
    monkeypatch.setattr(device, "cuda_sm_count", lambda: (_ for _ in ()).throw(WS.BackendUnavailable("no driver")))
    assert choose(1, 8, 4096, 128, False) == A.WIDE_PERSIST  # without a driver: the plain kernel


@pytest.mark.skipif(nvcc_path() is None, reason="nvcc not installed")
def test_it_compiles_for_sm_90a_and_under_the_mask_as_without_kt() -> None:
    cfg, plain = WS.parse_config(NAME), WS.parse_config(NAME.replace("_kt", ""))
    units = [tensor_copy_unit(f"kt{i}_{d}", c, d, causal)  # MLX's custom_kernel_<name>_<index>, as parse_ptxas reads
             for i, (c, d, causal) in enumerate(((cfg, 128, False), (cfg, 128, True), (plain, 128, True),
                                                 (cfg, 64, False)))]
    ok, log = compile_check([WGMMA_HEADER, tensor_map.TMA_HEADER, *units])
    assert ok, log[-3000:]
    assert "C751" not in log, "wgmma serialised"  # C7510-C7515: every wgmma of the kernel serialised
    spills = {k.kernel[:3]: k.spill_store_bytes for k in parse_ptxas(log)}
    assert len(spills) == 4, log[-3000:]
    # without the mask 24 bytes of the item bookkeeping go to the stack at D=128 (none in the main loop:
    # `python benchmarks/prefill_sass.py NAME`); under the mask, where nothing splits, none, as without `_kt`
    assert spills["kt1"] == spills["kt2"] == 0 and spills["kt0"] <= 32 and spills["kt3"] == 0, spills


@pytest.mark.parametrize("calls", ["independent", "chained"])
def test_prefill_calls_are_independent_or_each_takes_the_previous_output(calls: str) -> None:
    from ksearch.bench.attention import prefill_calls

    seen: list[tuple[object, object, object]] = []

    def call(q: object, k: object, v: object) -> object:
        seen.append((q, k, v))
        return f"o{len(seen)}"

    fn = prefill_calls(call, "q", "k", "v", calls)
    assert [fn() for _ in range(3)] == ["o1", "o2", "o3"]
    queries = [q for q, _, _ in seen]
    assert queries == (["q", "q", "q"] if calls == "independent" else ["q", "o1", "o2"])
    assert {(k, v) for _, k, v in seen} == {("k", "v")}


def test_bench_attention_refuses_an_unknown_way_of_calling_in_one_line(tmp_path: object) -> None:
    out = subprocess.run([sys.executable, "-m", "ksearch.cli", "bench", "attention", "--out", str(tmp_path),
                          "--calls", "together"], capture_output=True, text=True, timeout=120)
    assert out.returncode == 2, out.stderr[-2000:]
    assert "'together': use chained or independent" in " ".join(out.stderr.split())
    assert "Traceback" not in out.stderr


def test_the_item_trace_keeps_a_record_for_each_part(monkeypatch: pytest.MonkeyPatch) -> None:
    from pathlib import Path

    from script_module import load_module

    trace = load_module(Path(__file__).resolve().parents[1] / "benchmarks/prefill_item_trace.py")
    text = trace.stamped_source(WS.parse_config(NAME))
    consumer = text[text.index("setmaxnreg.inc"):]
    assert "+ vitem / (int)gridDim.x) * 10;" in consumer  # a part's round is its walked item's
    # the parts' merge before the epilogue's stamp, the merging warp's stores inside the epilogue
    assert consumer.index("atomicAdd(count, 1u)") < consumer.index("KS_STAMP(3)")
    assert consumer.index("KS_STAMP(3)") < consumer.index("kt_store && row_lo < L") < consumer.index("KS_STAMP(4)")
    monkeypatch.setattr(device, "cuda_sm_count", lambda: 132)
    cfg = WS.parse_config(NAME)
    assert trace.walked_items((1, 32, 4096, 128), (1, 8, 4096, 128), False, cfg) == 660 + 44 * 3
    assert trace.walked_items((1, 32, 4096, 128), (1, 8, 4096, 128), True, cfg) == 704


def test_the_schedule_model_deals_the_parts_in_the_last_round() -> None:
    from pathlib import Path

    from script_module import load_module

    tiles_script = load_module(Path(__file__).resolve().parents[1] / "benchmarks/prefill_tile_count.py")
    rows = {(r["config"], r["B"], r["L"], r["causal"]): r for r in tiles_script.schedule_rows(
        ["ws3_n64_s4_p4_tmas_pst_preg32_cr_wt_sn_uw", NAME], [2048, 4096], [1], 32, 132, 3.0)}
    plain, split = rows[("ws3_n64_s4_p4_tmas_pst_preg32_cr_wt_sn_uw", 1, 4096, False)], rows[(NAME, 1, 4096, False)]
    # six items of 64 + 3 tiles on the busiest block against five and the longest third (22 tiles) + 3 + 1
    assert plain["busiest_tiles"] == 6 * 67 and split["busiest_tiles"] == 5 * 67 + 22 + 3 + 1
    assert (split["walked"], split["last_round_items"], split["last_round_parts"]) == (660 + 44 * 3, 44, 3)
    what_if = tiles_script.schedule_rows([NAME], [2048], [1], 32, 132, 3.0, parts=3)[0]  # 88 items in 3 over 2 rounds
    assert what_if["last_round_parts"] == 3 and what_if["busiest_tiles"] == 2 * 35 + 2 * (11 + 4)  # against 3 x 35
    for key in ((1, 2048, False), (1, 4096, True)):  # 88 items left, or the mask: nothing splits
        assert rows[(NAME, *key)]["busiest_tiles"] == rows[("ws3_n64_s4_p4_tmas_pst_preg32_cr_wt_sn_uw", *key)][
            "busiest_tiles"] and rows[(NAME, *key)]["last_round_parts"] == 1


def test_the_walk_and_the_records_take_parts_over_more_than_one_round_as_written() -> None:
    # Only the part count keeps the parts to one round: with KT = 3 for 88 last-round items on 132 blocks (two rounds
    # of parts) the kernel's own mapping still visits each item's key tiles once, and the records' indices stay apart.
    _, loop, tiles = kernel_formula()
    env = {"KT_FULL": 264, "KT_TAIL": 88, "KT": 3, "VITEMS": 264 + 88 * 3}
    spans: dict[int, list[tuple[int, int]]] = {}
    records = set()
    for vitem in range(env["VITEMS"]):
        e = _run(loop, {**env, "vitem": vitem})
        t = _run(tiles, {"kpart": e["kpart"], "kparts": e["kparts"], "n_end": 32 * 64, "BN": 64})
        spans.setdefault(e["item"], []).append((t["t_lo"], t["ntiles"]))
        if e["kt_part"]:
            records.add(e["kpart"] * env["KT_TAIL"] + e["item"] - env["KT_FULL"])  # the kernel's record index
    assert sorted(spans) == list(range(352)) and len(records) == 88 * 3
    assert all(sum(n for _, n in s) == 32 and len(s) == (3 if item >= 264 else 1) for item, s in spans.items())
