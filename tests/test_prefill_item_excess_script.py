"""benchmarks/prefill_item_excess.py: the excess an item, (1 - S) x T, per head dim, mask and length, over one or more
`bench attention` files; a group whose kernel is not of the wgmma family gets no scale; bad files are one line."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
from script_module import import_benchmark

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks/prefill_item_excess.py"
excess = import_benchmark("prefill_item_excess")
WIDE = "ws3_n64_s4_p4_tmas_cr"


def _file(tmp: Path, name: str, rows: list[dict]) -> str:
    path = tmp / name
    path.write_text(json.dumps({"figures": rows}))
    return str(path)


def _row(length: int, speedup: float, kernel: str = WIDE, causal: bool = False, d: int = 128) -> dict:
    return {"D": d, "causal": causal, "L": length, "speedup": speedup, "kernel": kernel}


def test_an_item_of_wide_runs_a_tile_per_64_keys_and_about_half_with_the_mask():
    assert excess.mean_item_tiles(WIDE, 4096, False) == 64
    assert 33 < excess.mean_item_tiles(WIDE, 4096, True) < 36  # 192-row blocks down the diagonal
    assert excess.mean_item_tiles("native", 4096, False) is None


def test_the_excess_is_one_minus_s_times_the_tiles_over_every_files_shapes(tmp_path: Path):
    a = _file(tmp_path, "a.json", [_row(2048, 0.9), _row(4096, 0.95)])
    b = _file(tmp_path, "b.json", [_row(2048, 0.9), _row(4096, 0.93)])
    lines = excess.excess(excess.load([a, b]))
    by_l = {x["L"]: x for x in lines}
    assert by_l[2048]["shapes"] == 2 and by_l[2048]["excess_tiles"] == pytest.approx(0.1 * 32)
    s4096 = (0.95 * 0.93) ** 0.5
    assert by_l[4096]["speedup"] == pytest.approx(s4096) and by_l[4096]["excess_tiles"] == pytest.approx(
        (1 - s4096) * 64)


def test_a_configuration_timed_beside_the_dispatch_takes_its_place(tmp_path: Path):
    row = _row(2048, 0.9) | {"configs": {"pst": {"kernel": "ws3_n64_s4_p4_tmas_pst_preg32_cr", "speedup": 0.8}}}
    path = _file(tmp_path, "a.json", [row])
    line = excess.excess(excess.load([path], "pst"))[0]
    assert line["kernels"] == ["ws3_n64_s4_p4_tmas_pst_preg32_cr"] and line["excess_tiles"] == pytest.approx(0.2 * 32)
    with pytest.raises(ValueError, match="timed no 'other'"):
        excess.load([path], "other")


def test_a_group_run_partly_by_mlx_gets_no_scale(tmp_path: Path):
    lines = excess.excess(excess.load([_file(tmp_path, "a.json", [_row(2048, 0.9), _row(2048, 1.0, "native")])]))
    assert lines[0]["kernels"] == ["native", WIDE] and "excess_tiles" not in lines[0]


def test_the_command_prints_a_line_a_group_and_writes_json(tmp_path: Path):
    src = _file(tmp_path, "a.json", [_row(2048, 0.9), _row(2048, 0.8, causal=True)])
    done = subprocess.run([sys.executable, str(SCRIPT), src, "--json", str(tmp_path / "out.json")],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and "3.20" in done.stdout and WIDE in done.stdout
    assert len(json.loads((tmp_path / "out.json").read_text())) == 2


@pytest.mark.parametrize("content", ["not json", json.dumps({"rows": []}), json.dumps({"figures": [{"D": 128}]})])
def test_a_file_that_is_not_a_bench_result_is_one_line(tmp_path: Path, content: str):
    bad = tmp_path / "bad.json"
    bad.write_text(content)
    done = subprocess.run([sys.executable, str(SCRIPT), str(bad)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and "not a `ksearch bench attention` result" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1
