"""The softmax's exponential on the FMA units (`_peN`, wgmma_ws.POLY_EXP2): its text compiled on the host with the C++
compiler and run against exp2 over the range P takes, the causal mask's -inf included; the configurations parse and
rename as they should."""

import math
import shutil
import subprocess
from pathlib import Path

import pytest

from ksearch.kernels.attention import wgmma_ws as WS

CXX = shutil.which("g++") or shutil.which("clang++")
SHIMS = r"""
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
static float __fadd_rn(float a, float b) { return a + b; }
static float __fsub_rn(float a, float b) { return a - b; }
static float __int_as_float(int i) { float f; std::memcpy(&f, &i, 4); return f; }
static int __float_as_int(float f) { int i; std::memcpy(&i, &f, 4); return i; }
static float ks_exp2(float x) { return std::exp2(x); }
"""


@pytest.mark.skipif(CXX is None, reason="no C++ compiler")
def test_the_cubic_is_exp2_within_fp16s_half_ulp(tmp_path: Path) -> None:
    body = WS.POLY_EXP2.replace("PE", "1")  # every element through the cubic
    program = tmp_path / "poly.cpp"
    program.write_text(SHIMS + "int main(int argc, char** argv) {\n  const float sl2 = 1.f; const float msc[2] = {0.f, 0.f};\n"
                       "  float s[1];\n  for (int a = 1; a < argc; ++a) {\n    const int i = 0;\n"
                       "    s[0] = std::strtof(argv[a], nullptr);\n    " + body
                       + "\n    std::printf(\"%.9g\\n\", s[0]);\n  }\n}\n")
    exe = tmp_path / "poly"
    subprocess.run([CXX, "-O2", "-o", str(exe), str(program)], check=True, capture_output=True, timeout=120)
    xs = [-x / 64 for x in range(0, 64 * 40)] + [-125.7, -126.0, -130.0, -1e30, float("-inf")]
    out = subprocess.run([str(exe), *map(repr, xs)], check=True, capture_output=True, text=True, timeout=60).stdout
    got = [float(v) for v in out.split()]
    for x, y in zip(xs, got, strict=True):
        if x >= -120:
            assert abs(y / 2.0 ** x - 1) < 1e-4, (x, y)
        else:  # clamped at -126: a masked key's P about 1e-38, never negative, inf or nan
            assert 0 <= y < 1e-37 and math.isfinite(y), (x, y)


def test_pe_names_parse_render_and_refuse() -> None:
    cfg = WS.parse_config("ws2_n128_s3_p4_tmas_pst_pe4")
    assert cfg.pexp == 4 and WS.config_name(cfg) == "ws2_n128_s3_p4_tmas_pst_pe4" and WS.kernel_name(cfg).endswith("_pe4")
    text = WS.source_text(cfg)
    assert WS.EXP2_LINE not in text and "if (i % 4 == 4 - 1)" in text
    assert WS.EXP2_LINE in WS.source_text(WS.parse_config("ws2_n128_s3_p4_tmas_pst"))  # the default keeps MUFU
    with pytest.raises(ValueError, match="_peN takes every N-th exponential"):
        WS.parse_config("ws2_n128_s3_p4_tmas_pst_pe9")
