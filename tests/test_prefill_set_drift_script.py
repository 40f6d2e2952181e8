"""benchmarks/prefill_set_drift.py: two sets of `bench attention` files compared group by group, our latency and
cuDNN's each as the base set's over the change set's (each shape's latency the geometric mean over a set's files),
and bad input as one line."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
from script_module import import_benchmark

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks/prefill_set_drift.py"
drift = import_benchmark("prefill_set_drift")


def _fig(d: int, causal: bool, length: int, ours: float, cudnn: float, kernel: str) -> dict:
    return {"B": 1, "Hq": 32, "Hkv": 8, "D": d, "L": length, "S": length, "dtype": "float16", "causal": causal,
            "latency_s": ours, "native_latency_s": cudnn, "kernel": kernel}


def _write(path: Path, figures: list[dict]) -> str:
    path.write_text(json.dumps({"name": "attention-prefill", "figures": figures}))
    return str(path)


def test_each_group_compares_the_two_sets_by_geometric_means(tmp_path: Path) -> None:
    base = [_write(tmp_path / "a1.json", [_fig(128, False, 4096, 2.0, 1.0, "k"), _fig(64, True, 2048, 1.0, 1.0, "t")]),
            _write(tmp_path / "a2.json", [_fig(128, False, 4096, 8.0, 1.0, "k"), _fig(64, True, 2048, 1.0, 1.0, "t")])]
    change = [_write(tmp_path / "b1.json", [_fig(128, False, 4096, 2.0, 2.0, "k_r1"), _fig(64, True, 2048, 0.5, 1.0, "t")])]
    rows = {r["group"]: r for r in drift.compare(drift.load_set(base), drift.load_set(change))}
    # D=128: the base's latency sqrt(2 * 8) = 4 against 2: twice as fast; cuDNN 1 against 2: half as fast
    assert rows["D=128, no mask, L >= 4096"] == {"group": "D=128, no mask, L >= 4096", "shapes": 1,
                                                 "ours": pytest.approx(2.0), "cudnn": pytest.approx(0.5),
                                                 "kernels_differ": True}
    assert rows["D=64, mask, L < 4096"]["ours"] == pytest.approx(2.0)
    assert not rows["D=64, mask, L < 4096"]["kernels_differ"]
    by_length = drift.compare(drift.load_set(base), drift.load_set(change), by_length=True)
    assert [r["group"] for r in by_length] == ["D=64, mask, L=2048", "D=128, no mask, L=4096"]


def test_sets_of_other_shapes_are_refused(tmp_path: Path) -> None:
    a = _write(tmp_path / "a.json", [_fig(128, False, 4096, 1.0, 1.0, "k")])
    b = _write(tmp_path / "b.json", [_fig(128, False, 8192, 1.0, 1.0, "k")])
    with pytest.raises(ValueError, match="different shapes"):
        drift.compare(drift.load_set([a]), drift.load_set([b]))
    with pytest.raises(ValueError, match="other shapes than the set's first file"):
        drift.load_set([a, b])


@pytest.mark.parametrize("text, says", [("{}", "not a `ksearch bench attention` result"),
                                        ("not json", "not a `ksearch bench attention` result"),
                                        ('{"figures": [{"B": 1}]}', "not a `ksearch bench attention` result")])
def test_a_bad_file_is_one_line_and_exit_2(tmp_path: Path, text: str, says: str) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text(text)
    good = _write(tmp_path / "good.json", [_fig(64, False, 2048, 1.0, 1.0, "t")])
    proc = subprocess.run([sys.executable, str(SCRIPT), "--base", good, "--change", str(bad)], capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 2 and says in proc.stderr and len(proc.stderr.strip().splitlines()) == 1


def test_the_table_has_a_line_a_group(tmp_path: Path) -> None:
    a = _write(tmp_path / "a.json", [_fig(128, True, 8192, 3.0, 1.0, "k"), _fig(64, False, 2048, 1.0, 1.0, "t")])
    b = _write(tmp_path / "b.json", [_fig(128, True, 8192, 2.0, 1.0, "k"), _fig(64, False, 2048, 1.0, 1.0, "t")])
    proc = subprocess.run([sys.executable, str(SCRIPT), "--base", a, "--change", b], capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 0
    lines = proc.stdout.splitlines()
    assert len(lines) == 3 and "D=128, mask, L >= 4096" in lines[2] and "1.500" in lines[2] and "same" in lines[2]
