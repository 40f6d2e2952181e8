"""benchmarks/ncu_prefill.py without a GPU: the ncu command it runs, what it reads back from ncu's raw CSV (cycles a
tile, stall reasons), the side-by-side table, the retry without metrics ncu does not know, the kept report, and its
one-line refusals."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
from script_module import import_benchmark

from ksearch.harness import ncu
from ksearch.kernels.attention.wgmma_ws import parse_config

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks/ncu_prefill.py"
DATA = Path(__file__).resolve().parent / "data" / "ncu"
prefill = import_benchmark("ncu_prefill")


def _csv(cycles: float, stalls: dict[str, float], duration_us: float = 300.0) -> str:
    stall_cols = [f"smsp__average_warps_issue_stalled_{r}_per_issue_active.ratio" for r in stalls]
    header = ["ID", "Process ID", "Kernel Name", "Block Size", "Grid Size", "gpu__time_duration.sum",
              prefill.CYCLES, prefill.INSTRUCTIONS, prefill.TENSOR_ACTIVE, *stall_cols]
    units = ["", "", "", "", "", "usecond", "cycle", "inst", "%", *([""] * len(stalls))]
    row = ["0", "41", "custom_kernel_ks_flash_ws_0", "(512, 1, 1)", "(22, 32, 1)", f"{duration_us}", f"{cycles:,.0f}",
           "12,345,678", "71.5", *(str(v) for v in stalls.values())]
    return "==PROF== Connected to process 41\n" + "\n".join(
        ",".join(f'"{c}"' for c in r) for r in (header, units, row)) + "\n"


def test_shapes_are_b_by_l_and_anything_else_says_the_form():
    assert prefill.shape("4x8192") == (4, 8192)
    for bad in ("4x", "4", "0x4096", "ax4096"):
        with pytest.raises(ValueError, match="BxL|positive"):
            prefill.shape(bad)


def test_an_sm_runs_the_shapes_tiles_over_the_sms():
    wide = parse_config("ws3_n64_s4_p4_tmas_cr")
    # 32 heads x 22 blocks of 192 rows, 64 tiles of 64 keys each, over 132 SMs
    assert prefill.tiles_per_sm(wide, 1, 4096, False) == pytest.approx(32 * 22 * 64 / 132)
    assert prefill.tiles_per_sm(wide, 4, 4096, False) == pytest.approx(4 * 32 * 22 * 64 / 132)
    causal = prefill.tiles_per_sm(wide, 1, 4096, True)
    assert 0.45 < causal / prefill.tiles_per_sm(wide, 1, 4096, False) < 0.55


def test_the_command_profiles_the_second_call_of_the_prefill_kernel_at_base_clocks():
    cmd = prefill.profile_command("/x/ncu", "/tmp/log.csv", ("a.sum", "b.max"), 4, 2048, 64, True)
    text = " ".join(cmd)
    assert cmd[0] == "/x/ncu" and "--clock-control base" in text and "-k regex:ks_flash" in text
    assert "-s 1 -c 1" in text and "--metrics a.sum,b.max" in text and "--log-file /tmp/log.csv" in text
    assert cmd[-5:] == ["2048", "64", "causal", "--batch", "4"]
    kept = prefill.profile_command("/x/ncu", "", (), 1, 4096, 128, False, report="/out/r")
    assert "-o" in kept and "/out/r" in kept and "SourceCounters" in kept and "--metrics" not in kept
    assert "full" in kept


def test_a_row_reads_cycles_a_tile_and_the_stalls_largest_first():
    row = prefill.row_for("ws3_n64_s4_p4_tmas_cr", _csv(700_000, {"wait": 0.5, "barrier": 2.0, "selected": 1.0}),
                          350.0)
    assert row["kernel"] == "custom_kernel_ks_flash_ws_0" and row["cycles"] == 700_000
    assert row["cycles_per_tile"] == pytest.approx(2000.0)
    assert row["duration_s"] == pytest.approx(300e-6) and row["instructions"] == 12_345_678
    assert list(row["stalls"]) == ["barrier", "wait"]  # "selected" is issuing, not a stall
    with pytest.raises(ValueError, match="no ncu raw-page CSV"):
        prefill.row_for("x", "==PROF== nothing profiled\n", 1.0)


def test_the_table_shows_each_stall_beside_the_first_configurations():
    rows = [prefill.row_for("wide", _csv(700_000, {"barrier": 2.0, "wait": 0.5}), 350.0),
            prefill.row_for("wide_persistent", _csv(735_000, {"barrier": 2.0, "wait": 0.75, "long_scoreboard": 0.1}),
                            350.0)]
    table = prefill.compare(rows)
    assert "wide_persistent" in table and "2,000" in table and "2,100" in table
    assert "0.750 (+0.250)" in table and "0.100 (+0.100)" in table and "2.000 (+0.000)" in table


def test_metric_values_reads_any_column_of_a_real_capture():
    text = (DATA / "h200_torch_gemm_softmax_raw.csv").read_text()
    kernels = ncu.parse_csv(text)
    values = ncu.metric_values(text, (ncu.DURATION, "no_such_metric.sum"))
    assert len(values) == len(kernels) and all("no_such_metric.sum" not in v for v in values)
    assert all(v.get(ncu.DURATION) is not None for v in values)


def _fake_ncu(tmp: Path, csv_text: str, unknown_once: bool = False) -> Path:
    (tmp / "raw.csv").write_text(csv_text)
    fake = tmp / "ncu"
    fake.write_text(f"""#!/bin/bash
echo "$*" >> {tmp}/calls
args="$*"
if [[ "$args" == *"-i "* ]]; then echo '"Address","Source","Warp Stall Sampling (All Samples)"'; exit 0; fi
if [[ "$args" == *" -o "* ]]; then
  out=$(echo "$args" | sed -E 's/.* -o ([^ ]+).*/\\1/'); echo report > "$out.ncu-rep"; exit 0
fi
log=$(echo "$args" | sed -E 's/.*--log-file ([^ ]+).*/\\1/')
if [ {int(unknown_once)} = 1 ] && [[ "$args" == *sm__cycles_elapsed* ]]; then  # ncu writes its errors to the log
  echo '==ERROR== Failed to find metric regex:^sm__cycles_elapsed\\.(max)$' > "$log"; exit 1
fi
cp {tmp}/raw.csv "$log"
""")
    fake.chmod(0o755)
    return fake


def test_profile_asks_again_without_a_metric_ncu_does_not_know_and_keeps_the_report(tmp_path: Path):
    fake = _fake_ncu(tmp_path, _csv(700_000, {"barrier": 2.0}), unknown_once=True)
    out = tmp_path / "out"
    out.mkdir()
    row = prefill.profile(str(fake), "ws3_n64_s4_p4_tmas_cr", 1, 4096, 128, False, out, source=True)
    calls = (tmp_path / "calls").read_text().splitlines()
    assert "sm__cycles_elapsed.max" in calls[0] and "sm__cycles_elapsed" not in calls[1]
    assert row["stalls"] == {"barrier": 2.0} and row["report"] == "ncu-prefill-ws3_n64_s4_p4_tmas_cr.ncu-rep"
    assert (out / "ncu-prefill-ws3_n64_s4_p4_tmas_cr.ncu-rep").is_file()
    assert "Warp Stall Sampling" in (out / "ncu-prefill-ws3_n64_s4_p4_tmas_cr-sass.csv").read_text()


def test_a_report_that_fails_is_recorded_with_the_counters_kept(tmp_path: Path):
    fake = _fake_ncu(tmp_path, _csv(700_000, {"barrier": 2.0}))
    failing = 'then echo "==ERROR== unknown option --print-source"; exit 1; echo \'"Address"'
    text = fake.read_text().replace('then echo \'"Address"', failing)
    fake.write_text(text)
    row = prefill.profile(str(fake), "ws3_n64_s4_p4_tmas_cr", 1, 4096, 128, False, tmp_path, source=True)
    assert row["cycles"] == 700_000 and "unknown option --print-source" in row["source_error"]
    assert row["report"] == "ncu-prefill-ws3_n64_s4_p4_tmas_cr.ncu-rep"


def test_an_ncu_failure_is_its_one_line(tmp_path: Path):
    fake = tmp_path / "ncu"
    fake.write_text("#!/bin/bash\necho '==ERROR== ERR_NVGPUCTRPERM - no permission'; exit 1\n")
    fake.chmod(0o755)
    with pytest.raises(RuntimeError, match="no permission to read the GPU's performance counters") as failed:
        prefill.profile(str(fake), "ws3_n64_s4_p4_tmas_cr", 1, 4096, 128, False, tmp_path, source=False)
    assert "goes on" not in str(failed.value)  # the harness's consequence is not the benchmark's


@pytest.mark.parametrize(("args", "env", "want"), [
    (["--configs", "ws3_n64_s4_p4_nope"], {}, "is not a wgmma configuration"),
    (["--shape", "4"], {}, "give BxL"),
    ([], {"KSEARCH_NCU": "/nonexistent/ncu"}, "ncu (Nsight Compute) is not here"),
])
def test_bad_input_is_refused_in_one_line(tmp_path: Path, args: list[str], env: dict[str, str], want: str):
    done = subprocess.run([sys.executable, str(SCRIPT), str(tmp_path), *args], capture_output=True, text=True,
                          timeout=120, env={**os.environ, **env})
    assert done.returncode == 2 and want in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1
