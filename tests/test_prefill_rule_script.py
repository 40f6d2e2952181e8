"""benchmarks/prefill_rule.py: a dispatch rule composed from one `bench attention --configs` file: the first matching
rule takes a shape, a configuration that ran MLX's attention there leaves the dispatch's figure, and bad input is one
line."""

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest
from script_module import import_benchmark

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks/prefill_rule.py"
rule = import_benchmark("prefill_rule")


def _row(d: int, causal: bool, length: int, speedup: float, **configs: tuple[str, float]) -> dict:
    return {"D": d, "causal": causal, "L": length, "speedup": speedup,
            "configs": {n: {"kernel": k, "speedup": s} for n, (k, s) in configs.items()}}


ROWS = [_row(128, True, 4096, 0.9, a=("a", 1.0), b=("b", 2.0)),
        _row(128, False, 4096, 0.8, a=("a", 0.4), b=("b", 0.5)),
        _row(64, True, 2048, 0.5, a=("native", 3.0), b=("b", 0.7))]


def test_the_first_matching_rule_takes_a_shape_and_a_native_fallback_keeps_the_dispatch():
    out = rule.compose(ROWS, [rule.parse_rule("D=128,mask:a"), rule.parse_rule("mask:b"), rule.parse_rule("D=64:a")])
    # row 0: D=128 with the mask -> a (1.0), not b; row 1: no rule -> 0.8; row 2: mask -> b (0.7), never reaching D=64
    assert out["rule"]["all"] == pytest.approx((1.0 * 0.8 * 0.7) ** (1 / 3))
    assert out["rule"]["D=128, L >= 4096"] == pytest.approx(math.sqrt(1.0 * 0.8))
    assert out["dispatch"]["D=64"] == pytest.approx(0.5)
    assert out["shapes_taken"] == {"a": 1, "b": 1}
    fallback = rule.compose(ROWS, [rule.parse_rule("D=64:a")])  # a ran native at the D=64 shape
    assert fallback["rule"] == fallback["dispatch"] and fallback["shapes_taken"] == {"a": 0}


@pytest.mark.parametrize("take, says", [("D=12:a", "unknown term 'D=12'"), ("a", "write TERMS:CONFIG"),
                                        ("mask:", "write TERMS:CONFIG"), ("mask:zz", "'zz' was not timed")])
def test_bad_rules_and_files_are_refused_in_one_line(tmp_path, take, says):
    path = tmp_path / "configs.json"
    path.write_text(json.dumps({"figures": ROWS}))
    done = subprocess.run([sys.executable, str(SCRIPT), str(path), "--take", take], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 2 and says in done.stderr and done.stderr.count("\n") == 1
    (tmp_path / "bad.json").write_text("[]")
    done = subprocess.run([sys.executable, str(SCRIPT), str(tmp_path / "bad.json"), "--take", "mask:a"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "is not a `bench attention --configs` result" in done.stderr


def test_it_prints_the_dispatch_beside_the_rule(tmp_path):
    path = tmp_path / "configs.json"
    path.write_text(json.dumps({"figures": ROWS}))
    done = subprocess.run([sys.executable, str(SCRIPT), str(path), "--take", "D=128,mask:a"], capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith("dispatch: all") and lines[1].strip().startswith("rule: all")
    assert lines[2] == "shapes taken: a 1"
