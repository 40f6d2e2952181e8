"""benchmarks/prefill_sass.py: reading cuobjdump's SASS, finding a kernel's main loop, comparing two loops, and its
one-line refusals; with nvcc, cuobjdump and nvdisasm present, the library's 16-byte epilogue against the 4-byte one."""

import json
import subprocess
import sys
from pathlib import Path

import pytest
from script_module import load_module

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks/prefill_sass.py"
sass = load_module(SCRIPT)

SAMPLE = """
        /*0000*/                   LDC R1, c[0x0][0x28] ;                                  /* 0x00000a00ff017b82 */
        /*0010*/                   S2R R0, SR_TID.X ;                                      /* 0x0000000000007919 */
        /*0020*/                   HGMMA.64x128x16.F32 R24, gdesc[UR4], RZ, !UPT ;         /* 0x0000000018187df0 */
        /*0030*/                   R2UR UR8, R2 ;                                          /* 0x00000000020872ca */
        /*0040*/                   HGMMA.64x128x16.F32 R24, gdesc[UR8], R24 ;              /* 0x0000000818187df0 */
        /*0050*/               @P0 BRA 0x20 ;                                              /* 0x0000000000000947 */
        /*0060*/                   FADD R3, R3, R4 ;                                       /* 0x0000000403037221 */
        /*0070*/               @P1 BRA 0x10 ;                                              /* 0x0000000000000947 */
        /*0080*/                   EXIT ;                                                  /* 0x000000000000794d */
"""


def test_the_main_loop_is_the_first_innermost_loop_that_issues_hgmma() -> None:
    ins = sass.parse_sass(SAMPLE)
    assert ins[0] == (0, "LDC R1, c[0x0][0x28]") and len(ins) == 9
    assert sass.loops(ins) == [(2, 5), (1, 7)]  # the inner loop at 0x20, the outer at 0x10
    loop = sass.main_loop(ins)
    assert loop is not None and len(loop) == 4 and loop[-1] == "@P0 BRA 0x20"
    assert sass.summary(loop, 8) == {"main_loop": 4, "hgmma": 2, "r2ur": 1, "bssy": 0, "local": 0, "spill_bytes": 8}
    assert sass.summary(loop + ["STL [R1+0x4], R2", "@P0 LDL.LU R3, [R1+0x4]"], None)["local"] == 2
    assert sass.main_loop(sass.parse_sass(SAMPLE.replace("HGMMA.64x128x16.F32", "FMUL"))) is None


def test_two_loops_are_the_same_code_whatever_their_branch_targets() -> None:
    a = ["HGMMA.64x128x16.F32 R24, gdesc[UR4], R24", "@P0 BRA 0x20"]
    assert sass.same_code(a, [a[0], "@P0 BRA 0x7f0"])
    assert not sass.same_code(a, ["HGMMA.64x128x16.F32 R24, gdesc[UR8], R24", "@P0 BRA 0x20"])
    # registers renamed: not the same code, but the same but for registers; another opcode is neither
    renamed = ["HGMMA.64x128x16.F32 R26, gdesc[UR10], R26", "@P1 BRA 0x20"]
    assert not sass.same_code(a, renamed) and sass.same_but_registers(a, renamed)
    assert not sass.same_but_registers(a, ["HGMMA.64x64x16.F32 R24, gdesc[UR4], R24", "@P0 BRA 0x20"])


def test_the_softmax_path_runs_from_the_wait_on_s_to_the_row_sums_product() -> None:
    loop = ["HGMMA.64x64x16.F32 R88, gdesc[UR4], RZ", "HGMMA.64x128x16.F32 R24, R140, gdesc[UR12].tnspB",
            "WARPGROUP.DEPBAR.LE gsb0, 0x1", "FMNMX R3, R88, R89, !PT", "SHFL.BFLY PT, R4, R3, 0x1, 0x1f",
            "FFMA R88, R88, R5, -R6", "MUFU.EX2 R88, R88", "F2FP.F16.F32.PACK_AB R7, R89, R88",
            "HGMMA.64x8x16.F32 R136, R88, gdesc[UR8], R136", "WARPGROUP.DEPBAR.LE gsb0, 0x0", "@P0 BRA 0x20"]
    assert sass.softmax_path(loop) == {"s_wait_to_first_exp": 4, "s_wait_to_sums": 6, "shuffles_between": 1}
    assert sass.softmax_path(None) == {} and sass.softmax_path([x for x in loop if "0x1" not in x]) == {}


@pytest.mark.parametrize("args, message", [
    (["ws3_n64_s4_p4_tmas", "--shapes", "96"], "--shapes takes 64 or 128"),
    (["wg3_n64"], "is not a producer-warpgroup configuration"),
    (["ws3_n64_s4_p4_nope"], "is not a wgmma configuration"),
])
def test_bad_input_is_refused_in_one_line(args: list[str], message: str) -> None:
    proc = subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=60)
    assert proc.returncode != 0 and message in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1


@pytest.mark.skipif(sass.tool("cuobjdump") is None or sass.tool("nvdisasm") is None, reason="no cuobjdump / nvdisasm")
def test_sixteen_byte_stores_leave_the_persistent_main_loop_as_it_was(tmp_path: Path) -> None:
    out = tmp_path / "sass.json"
    subprocess.run([sys.executable, str(SCRIPT), "ws2_n128_s3_p4_tmas_pst", "--against", "ws2_n128_s3_p4_tmas_pst_st4",
                    "--shapes", "64", "--json", str(out)], check=True, capture_output=True, timeout=600)
    row = json.loads(out.read_text())["rows"][0]
    assert row["main_loop_same_as_against"] and row["hgmma"] == 40

