"""benchmarks/gpu_suite.sh on a machine without a GPU: what it refuses, in one line, before any set-up."""

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

SUITE = Path(__file__).resolve().parents[1] / "benchmarks/gpu_suite.sh"


@pytest.mark.parametrize(("args", "message"), [
    ([], "name wgmma configurations"),
    (["ws3_n64_s4_p4_tmas_qn"], "_qn (the next item's Q"),
    (["ws3_n64_s4_p4_nope"], "is not a wgmma configuration"),
])
def test_gpu_suite_prefill_candidates_refuses_bad_names_before_any_setup(args: list[str], message: str) -> None:
    proc = subprocess.run(["bash", str(SUITE), "prefill-candidates", *args], capture_output=True, text=True, timeout=60,
                          env={"PATH": "/usr/bin:/bin", "PY": sys.executable, "OUT": "/nonexistent/out"})
    assert proc.returncode == 2 and message in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize(("args", "calls", "message"), [
    ([], "", "name variants of the dispatch"),
    (["dispatch-r1", "dispatch-zz"], "", "is not a variant of the dispatch"),
    (["dispatch-r1"], "chained separate", "KSEARCH_VARIANT_CALLS: 'separate' is not chained or independent"),
])
def test_gpu_suite_prefill_variant_refuses_bad_names_before_any_setup(args: list[str], calls: str, message: str) -> None:
    proc = subprocess.run(["bash", str(SUITE), "prefill-variant", *args], capture_output=True, text=True, timeout=60,
                          env={"PATH": "/usr/bin:/bin", "PY": sys.executable, "OUT": "/nonexistent/out",
                               "KSEARCH_VARIANT_CALLS": calls})
    assert proc.returncode == 2 and message in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1


def _archive(tmp: Path, name: str, files: dict[str, str]) -> Path:
    import tarfile

    src = tmp / "src" / name
    src.mkdir(parents=True)
    for rel, text in files.items():
        (src / rel).write_text(text)
    path = tmp / f"run-{name}.tar.gz"
    with tarfile.open(path, "w:gz") as tar:
        tar.add(src, arcname=name)
    return path


def _suite(tmp: Path, *args: str) -> subprocess.CompletedProcess[str]:
    # From a directory outside any checkout: the suite then finds no staged MLX to install and stops at its set-up.
    return subprocess.run(["bash", str(SUITE), *args], capture_output=True, text=True, timeout=60, cwd=tmp,
                          env={"PATH": "/usr/bin:/bin", "PY": sys.executable, "OUT": str(tmp / "out"),
                               "KSEARCH_SUITE_RUNS": str(tmp / "runs")})


def test_resume_unpacks_a_recorded_run_from_another_machine_before_its_set_up(tmp_path: Path) -> None:
    name = "20261204-171915-gqa_decode-ec6c4b"
    archive = _archive(tmp_path, name, {"run.db": "", "config.json": '{"task": "gqa_decode"}'})
    proc = _suite(tmp_path, "resume", str(archive))
    assert (tmp_path / "runs" / name / "run.db").is_file() and (tmp_path / "runs" / name / "config.json").is_file()
    assert proc.returncode == 2 and "MLX with CUDA is missing" in proc.stderr  # then the set-up, which needs the GPU


def test_resume_refuses_an_archive_without_a_run_in_one_line(tmp_path: Path) -> None:
    archive = _archive(tmp_path, "notes", {"readme.txt": "not a run"})
    proc = _suite(tmp_path, "resume", str(archive))
    assert proc.returncode == 2 and "no run in" in proc.stderr and "'record' wrote" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and not (tmp_path / "runs" / "notes").exists()


def test_resume_finds_the_run_in_an_archive_whose_listing_goes_on_after_it(tmp_path: Path) -> None:
    # A real run's archive lists run.db early and hundreds of candidates after it: the check must read the whole
    # listing rather than stop at the match (which ended tar by SIGPIPE and failed the check under pipefail).
    name = "20261205-042313-gqa_decode-196a58"
    files = {"run.db": "", "config.json": '{"task": "gqa_decode"}'}
    # names after run.db's in the order tarfile adds them (sorted)
    files.update({f"trace-{i:04d}-with-a-name-as-long-as-a-candidate-file-has.py": "" for i in range(3000)})
    archive = _archive(tmp_path, name, files)
    proc = _suite(tmp_path, "resume", str(archive))
    assert "no run in" not in proc.stderr and (tmp_path / "runs" / name / "run.db").is_file()
    assert proc.returncode == 2 and "MLX with CUDA is missing" in proc.stderr


def _fake_python(tmp: Path, record: Path) -> Path:
    # Stands in for the GPU machine's Python: MLX-CUDA "imports", pip "installs", pytest records its arguments.
    fake = tmp / "fake-python"
    fake.write_text(f"""#!/bin/bash
case "$1" in benchmarks/*.py) echo "$*" >> {record}; echo "ran $1";; esac
case "$1 $2" in "-c "*json.load*) exec python3 "$@";; esac  # reading a run's config.json: the real thing
if [ "$1 $2" = "-m ksearch.cli" ]; then echo "$*" >> {record}; tr '\\0' ' ' < /proc/$PPID/cmdline >> {record}.parent
  echo >> {record}.parent; fi
if [ "$1 $2" = "-m pytest" ]; then
  echo "$*" >> {record}
  case "$*" in *test_gpu_mamba.py*) echo "FAILED tests/test_gpu_mamba.py::test_x - boom"; echo "1 failed in 0.1s";;
               *) echo "3 passed in 0.1s";; esac
fi
exit 0
""")
    fake.chmod(0o755)
    return fake


def _suite_with(tmp: Path, fake: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["bash", str(SUITE), *args], capture_output=True, text=True, timeout=60, cwd=tmp,
                          env={"PATH": "/usr/bin:/bin", "PY": str(fake), "OUT": str(tmp / "out")})


def test_tests_all_runs_every_group_side_by_side_with_a_log_each(tmp_path: Path) -> None:
    record = tmp_path / "pytest-calls.txt"
    proc = _suite_with(tmp_path, _fake_python(tmp_path, record), "tests")
    calls = record.read_text().splitlines()
    assert len(calls) == 4  # core, attention, families, options: each group once
    assert sum("every_library_configuration" in c and "not every" not in c for c in calls) == 1
    assert sum("-k renderings_pass_the_harness" in c for c in calls) == 1
    assert sum("not renderings_pass_the_harness" in c and "test_gpu_decode_cluster.py" in c for c in calls) == 1
    for group in ("core", "attention", "families", "options"):
        assert (tmp_path / "out" / f"gpu-tests-{group}.log").is_file()
    out = proc.stdout
    assert "core: 1 failed in 0.1s" in out and "FAILED tests/test_gpu_mamba.py::test_x" in out
    assert "families: 3 passed in 0.1s" in out and "options: 3 passed in 0.1s" in out


def test_tests_with_a_group_or_files_runs_those_alone(tmp_path: Path) -> None:
    record = tmp_path / "pytest-calls.txt"
    fake = _fake_python(tmp_path, record)
    _suite_with(tmp_path, fake, "tests", "options")
    _suite_with(tmp_path, fake, "tests", "tests/test_gpu_harness.py", "-k", "softmax")
    calls = record.read_text().splitlines()
    assert len(calls) == 2
    assert "tests/test_gpu_decode_cluster.py" in calls[0] and "not renderings_pass_the_harness" in calls[0]
    assert calls[1].endswith("tests/test_gpu_harness.py -k softmax")


def test_prefill_power_passes_its_options_to_the_script_and_keeps_a_log(tmp_path: Path) -> None:
    record = tmp_path / "calls.txt"
    proc = _suite_with(tmp_path, _fake_python(tmp_path, record), "prefill-power", "--shapes", "1x4096", "--causal")
    assert proc.returncode == 0, proc.stderr
    assert record.read_text().splitlines() == [f"benchmarks/prefill_power.py {tmp_path / 'out'} --shapes 1x4096 --causal"]
    assert "ran benchmarks/prefill_power.py" in (tmp_path / "out" / "prefill-power-causal.log").read_text()
    assert not (tmp_path / "out" / "prefill-power.log").exists()  # a call without the mask keeps its own log


def test_ncu_passes_its_options_to_ncu_prefill_and_keeps_a_log(tmp_path: Path) -> None:
    record = tmp_path / "calls.txt"
    fake = _fake_python(tmp_path, record)
    tools = tmp_path / "tools"
    tools.mkdir()
    (tools / "ncu").write_text("#!/bin/bash\nexit 0\n")
    (tools / "ncu").chmod(0o755)
    env = {"PATH": f"{tools}:/usr/bin:/bin", "PY": str(fake), "OUT": str(tmp_path / "out")}
    proc = subprocess.run(["bash", str(SUITE), "ncu", "--shape", "4x8192", "--source"], capture_output=True, text=True,
                          timeout=60, cwd=tmp_path, env=env)
    assert proc.returncode == 0, proc.stderr
    assert record.read_text().splitlines() == [f"benchmarks/ncu_prefill.py {tmp_path / 'out'} --shape 4x8192 --source"]
    assert "ran benchmarks/ncu_prefill.py" in (tmp_path / "out" / "ncu-prefill.log").read_text()
    if shutil.which("ncu", path="/usr/bin:/bin"):
        return  # a machine with ncu in the system's folders cannot show the refusal below
    # without ncu on the machine the part stops in one line
    bare = subprocess.run(["bash", str(SUITE), "ncu"], capture_output=True, text=True, timeout=60, cwd=tmp_path,
                          env={**env, "PATH": "/usr/bin:/bin"})
    assert bare.returncode == 2 and "ncu (Nsight Compute) is not on this machine" in bare.stderr


def test_prefill_calls_is_a_part_that_needs_the_gpus_set_up(tmp_path: Path) -> None:
    proc = _suite(tmp_path, "prefill-calls")
    assert proc.returncode == 2 and "MLX with CUDA is missing" in proc.stderr
    assert not (tmp_path / "out" / "chained-1").exists()  # nothing timed before the set-up


def test_prefill_variant_times_the_variants_beside_the_dispatch_both_ways_in_two_processes(tmp_path: Path) -> None:
    record = tmp_path / "calls.txt"
    proc = _suite_with(tmp_path, _fake_python(tmp_path, record), "prefill-variant", "dispatch-r1", "dispatch+hs")
    assert proc.returncode == 0, proc.stderr
    calls = [c for c in record.read_text().splitlines() if " bench attention " in c]
    assert len(calls) == 4 and all("--full" in c and "--configs dispatch-r1,dispatch+hs" in c for c in calls)
    assert sum("--calls chained" in c for c in calls) == 2 and sum("--calls independent" in c for c in calls) == 2
    assert {c.split("--out ")[1] for c in calls} == {str(tmp_path / "out" / r) for r in ("variant", "variant-rerun")}
    # each run is cut at 90 s and 30 s a variant (four variants ran past a fixed 170 s on an H100)
    parents = (tmp_path / "calls.txt.parent").read_text().splitlines()
    assert len(parents) == 4 and all(p.startswith("timeout -k 10 150 ") for p in parents)


def test_prefill_variant_runs_one_protocol_where_told(tmp_path: Path) -> None:
    record = tmp_path / "calls.txt"
    env = {"PATH": "/usr/bin:/bin", "PY": str(_fake_python(tmp_path, record)), "OUT": str(tmp_path / "out"),
           "KSEARCH_VARIANT_CALLS": "independent"}
    variants = ["dispatch-cr", "dispatch-sn", "dispatch+hs", "dispatch-uw"]
    proc = subprocess.run(["bash", str(SUITE), "prefill-variant", *variants], capture_output=True, text=True,
                          timeout=60, cwd=tmp_path, env=env)
    assert proc.returncode == 0, proc.stderr
    calls = [c for c in record.read_text().splitlines() if " bench attention " in c]
    assert len(calls) == 2 and all("--calls independent" in c for c in calls)
    parents = (tmp_path / "calls.txt.parent").read_text().splitlines()
    assert all(p.startswith("timeout -k 10 210 ") for p in parents)


def test_the_usage_without_an_output_folder_ends_well(tmp_path: Path) -> None:
    # The listing of $OUT at the end once made every part that writes nothing there (`stage`, the usage) exit 2.
    proc = subprocess.run(["bash", str(SUITE)], capture_output=True, text=True, timeout=60, cwd=tmp_path,
                          env={"PATH": "/usr/bin:/bin", "PY": sys.executable, "OUT": str(tmp_path / "no-out")})
    assert proc.returncode == 0 and "prefill-variant VARIANT" in proc.stdout and not proc.stderr


def _recorded_attention_run(tmp: Path, name: str) -> tuple[Path, Path, dict[str, str]]:
    """An attention run's archive, the file the fake Python records its calls in, and the suite's environment."""
    archive = _archive(tmp, name, {"run.db": "", "config.json": '{"task": "attention"}'})
    record = tmp / "calls.txt"
    env = {"PATH": "/usr/bin:/bin", "PY": str(_fake_python(tmp, record)), "OUT": str(tmp / "out"),
           "KSEARCH_SUITE_RUNS": str(tmp / "runs")}
    return archive, record, env


def test_confirm_times_a_runs_best_again_from_an_archive_and_keeps_its_json(tmp_path: Path) -> None:
    name = "20261206-101638-attention-44376e"
    archive, record, env = _recorded_attention_run(tmp_path, name)
    proc = subprocess.run(["bash", str(SUITE), "confirm", str(archive), "2"], capture_output=True, text=True,
                          timeout=60, cwd=tmp_path, env=env)
    assert proc.returncode == 0, proc.stderr
    proc = subprocess.run(["bash", str(SUITE), "confirm", str(archive), "2", "1"], capture_output=True, text=True,
                          timeout=60, cwd=tmp_path, env={**env, "ADOPT": "1"})
    assert proc.returncode == 0, proc.stderr
    calls = [c for c in record.read_text().splitlines() if " confirm " in c]
    assert calls == [f"-m ksearch.cli confirm {tmp_path / 'runs' / name} --top 2 --times 3",
                     f"-m ksearch.cli confirm {tmp_path / 'runs' / name} --top 2 --times 1 --adopt"]
    assert (tmp_path / "out" / "search-attention-confirm.log").is_file(), proc.stdout + proc.stderr
    missing = subprocess.run(["bash", str(SUITE), "confirm", str(tmp_path / "nowhere")], capture_output=True,
                             text=True, timeout=60, cwd=tmp_path, env=env)
    assert missing.returncode == 2 and "no run at" in missing.stderr


def test_resume_passes_a_larger_wall_time_on_only_where_given(tmp_path: Path) -> None:
    # A run that ended on its wall time goes on only with a larger one: `resume RUN CALL_S WALL_S` passes it.
    name = "20261206-171618-attention-b156bf"
    archive, record, env = _recorded_attention_run(tmp_path, name)
    for extra in (["300", "660"], []):
        proc = subprocess.run(["bash", str(SUITE), "resume", str(archive), *extra], capture_output=True, text=True,
                              timeout=60, cwd=tmp_path, env=env)
        assert proc.returncode == 0, proc.stderr
    run = tmp_path / "runs" / name
    calls = [c for c in record.read_text().splitlines() if " run --resume " in c]
    assert calls == [f"-m ksearch.cli run --resume {run} --wall-time 660 --quiet",
                     f"-m ksearch.cli run --resume {run} --quiet"]
