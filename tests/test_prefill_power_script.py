"""benchmarks/prefill_power.py: what a contender's row says (rate, energy and cycles a call) and its one-line
refusals; the sampler and the stream are decode_power.py's (tests/test_decode_power_script.py)."""

import subprocess
import sys
from pathlib import Path

import pytest
from script_module import import_benchmark

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks/prefill_power.py"
prefill_power = import_benchmark("prefill_power")


def test_the_causal_mask_halves_the_operations():
    full = prefill_power.prefill_flops(1, 4096, False)
    assert full == 4 * 32 * 4096 * 4096 * 128
    assert prefill_power.prefill_flops(1, 4096, True) == full / 2


def test_with_and_without_the_mask_the_results_have_their_own_names():
    assert prefill_power.result_name(True) == "prefill-power-causal"
    assert prefill_power.result_name(False) == "prefill-power"


def test_a_row_turns_power_and_clock_into_energy_and_cycles_a_call():
    window = {"samples": 20, "power_w_median": 650.0, "power_w_max": 700.0, "sm_mhz_median": 1500.0,
              "power_capped_share": 0.5}
    row = prefill_power.row_for(4, 8192, False, "native", 1, 0.008, 0.0079, window)
    assert row["tflops"] == pytest.approx(prefill_power.prefill_flops(4, 8192, False) / 0.008 / 1e12)
    assert row["joules_per_call"] == pytest.approx(5.2)
    assert row["mcycles_per_call"] == pytest.approx(12.0)  # 8 ms at 1,500 MHz
    # a window without samples gives the time alone, not made-up energy
    bare = prefill_power.row_for(4, 8192, False, "native", 1, 0.008, 0.0079, {"samples": 0})
    assert "joules_per_call" not in bare and "mcycles_per_call" not in bare


@pytest.mark.parametrize(("args", "want"), [(["--shapes", "4x"], "BxLENGTH"),
                                            (["--seconds", "0"], "positive window"),
                                            (["--configs", "ws3_n64_s4_p4_bulk_qp"], "takes tensor copies"),
                                            (["--configs", "nope"], "not a wgmma configuration")])
def test_bad_input_is_refused_in_one_line(tmp_path, args, want):
    done = subprocess.run([sys.executable, str(SCRIPT), str(tmp_path), *args], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode != 0 and want in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1
