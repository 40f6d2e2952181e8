"""Profiles in the run: one row per profiled candidate, an older run.db still opens and gains the table when
continued, `ksearch report` shows the counter table and the roofline position (text and HTML), `ksearch export`
writes them; and a search with profile = "best" profiles each cycle's best, moves its node's ratings and hands the
counters to the proposer."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

from test_report_fakerun import make_fake_run
from test_search_loop import ScriptedPolicy, scripted_judge
from typer.testing import CliRunner

from ksearch.cli import app
from ksearch.config import RunConfig
from ksearch.harness import ncu
from ksearch.harness.profile import ProfileReport
from ksearch.search.start import create_run, execute
from ksearch.store import RunReader, RunStore
from ksearch.store.schema import SCHEMA_VERSION
from ksearch.worldmodel import WorldModel

FIXTURE = Path(__file__).parent / "data" / "ncu" / "layout_gqa_decode_split_k.csv"


def _report(workload: str = "cpu_256x1024_f32") -> ProfileReport:
    launches = ncu.parse_csv(FIXTURE.read_text())
    summary = {**ncu.summarize(launches), "launches_per_call": 2.0}
    return ProfileReport(status="counters", backend="mlx-cuda", workload=workload, summary=summary,
                         kernels=[k.to_json() for k in launches], calls=2, roofline_fraction=0.61,
                         resources=[{"kernel": "ks_decode_split", "registers": 96, "spill_store_bytes": 0,
                                     "spill_load_bytes": 0, "stack_bytes": 0, "static_smem_bytes": 16384}],
                         duration_s=3.2)


def _cuda_run(tmp_path: Path) -> Path:
    path = make_fake_run(tmp_path)
    store = RunStore(path)
    store.set_meta("backend", "mlx-cuda")
    store.set_meta("environment", {"backend": "mlx-cuda", "hardware_profile": "nvidia-h200"})
    with store.transaction():
        store.add_profile("c0007", 2, _report().to_json())
        store.add_profile("c0003", 1, ProfileReport(status="no_counters", backend="mlx-cuda",
                                                    workload="cpu_256x1024_f32",
                                                    note="ncu has no permission (ERR_NVGPUCTRPERM)").to_json())
    store.close()
    return path


def test_profiles_round_trip_and_an_old_run_db_still_opens(tmp_path: Path) -> None:
    path = _cuda_run(tmp_path)
    with RunReader(path) as reader:
        rows = reader.profiles()
    assert [r.candidate_id for r in rows] == ["c0007", "c0003"] and rows[0].status == "counters"
    assert ProfileReport.from_json(rows[0].data).summary["stalls"][0]["reason"] == "long_scoreboard"
    # A run written before the profiles table: readable, no profiles; continued, it gains the table.
    old = make_fake_run(tmp_path / "old")
    db = sqlite3.connect(old / "run.db")
    db.execute("DROP TABLE profiles")
    db.commit()
    db.close()
    with RunReader(old) as reader:
        assert reader.profiles() == [] and reader.records().profiles == []
    store = RunStore(old)
    assert store.profile_of("c0007") is None
    with store.transaction():
        store.add_profile("c0007", 3, _report().to_json())
    # No new schema version: older ksearch versions still read the run (they do not know the table).
    assert store.get_meta("schema_version") == SCHEMA_VERSION == 2 and store.profile_of("c0007")["status"] == "counters"
    store.close()


def test_report_and_export_show_the_counters(tmp_path: Path) -> None:
    path = _cuda_run(tmp_path)
    runner = CliRunner()
    html = tmp_path / "report.html"
    r = runner.invoke(app, ["report", str(path), "--html", str(html), "--no-tree"], env={"COLUMNS": "220"})
    assert r.exit_code == 0, r.output
    assert "profiled candidates" in r.output and "long_scoreboard 72%" in r.output and "(registers)" in r.output
    assert "roofline position" in r.output and "memory" in r.output  # softmax sits below the H200's ridge
    assert "ERR_NVGPUCTRPERM" in r.output
    page = html.read_text()
    assert 'id="profiles"' in page and "long_scoreboard 72%" in page and "Roofline position" in page
    out = tmp_path / "kernel.py"
    r = runner.invoke(app, ["export", str(path), "--out", str(out)])
    assert r.exit_code == 0, r.output
    assert "#   profile:   DRAM 82% of peak" in out.read_text()
    exported = json.loads((tmp_path / "kernel.profiles.json").read_text())
    assert [p["candidate"] for p in exported] == ["c0007", "c0003"] and exported[0]["summary"]["launches"] == 4
    r = runner.invoke(app, ["export", str(path), "--format", "flashinfer-trace", "--out", str(tmp_path / "fib")])
    assert r.exit_code == 0, r.output
    assert len(json.loads((tmp_path / "fib" / "ksearch-profiles.json").read_text())) == 2


def test_a_run_without_counters_says_so(tmp_path: Path) -> None:
    r = CliRunner().invoke(app, ["report", str(make_fake_run(tmp_path)), "--no-tree"], env={"COLUMNS": "200"})
    assert r.exit_code == 0 and "hardware counters are not available on mlx-cpu" in r.output


def test_the_reason_for_no_counters_is_said_once(tmp_path: Path) -> None:
    path = make_fake_run(tmp_path)
    store = RunStore(path)
    note = "hardware counters are not available on mlx-cpu: the roofline fraction only"
    store.add_profile("c0001", 1, {"status": "roofline_only", "backend": "mlx-cpu", "workload": "w", "note": note})
    store.close()
    r = CliRunner().invoke(app, ["report", str(path), "--no-tree"], env={"COLUMNS": "200"})
    assert r.exit_code == 0 and r.output.count("hardware counters") == 1, r.output
    # The reason in one line of the terminal's width, not wrapped to the narrow table's (as its caption was).
    assert any(note in line for line in r.output.splitlines()), r.output
    # The roofline table leaves out a column with nothing in it (the CPU's profile has no roofs: no bound).
    header = next(line for line in r.output.splitlines() if line.startswith("candidate") and "flop/byte" in line)
    assert "bound" not in header and "roofline" in header, r.output


def test_the_roofline_table_names_how_many_candidates_it_shows(tmp_path: Path) -> None:
    """A run with fewer passed candidates than the table's five says how many it shows (text and HTML)."""
    html = tmp_path / "report.html"
    for n_evals, title in ((8, "best 4 candidates"), (1, "best candidate")):  # passed: c0000, c0002, c0005, c0007
        path = make_fake_run(tmp_path / str(n_evals), n_evals=n_evals)
        r = CliRunner().invoke(app, ["report", str(path), "--no-tree", "--html", str(html)], env={"COLUMNS": "200"})
        assert r.exit_code == 0, r.output
        assert f"roofline position of the {title}" in r.output and "best 5" not in r.output, r.output
        assert f"<h3>Roofline position of the {title}</h3>" in html.read_text()


class Recording(ScriptedPolicy):
    def __init__(self, plan: dict[str, list[tuple[str, float]]]) -> None:
        super().__init__(plan)
        self.evidence: list[Any] = []

    def update(self, ctx: Any, wm: dict[str, Any], cycle: list[Any], rejection: str | None,
               evidence: Any = None) -> dict[str, Any]:
        self.evidence.append(evidence)
        return super().update(ctx, wm, cycle, rejection, evidence)


def test_profile_best_measures_each_cycles_best_once(tmp_path: Path) -> None:
    profiled: list[str] = []

    def profile(source: str, result: Any) -> ProfileReport:
        profiled.append(source)
        return _report()

    cfg = RunConfig(task="softmax", backend="mlx-cpu", budget=8, runs_dir=str(tmp_path), stagnation_window=2,
                    profile="best")
    store, _, _ = create_run(cfg)
    policy = Recording({"A": [("passed", 2.0), ("passed", 1.5), ("passed", 1.4)]})
    execute(store, cfg, evaluate=scripted_judge, policy=policy, profile=profile)
    rows = RunReader(store.path).profiles()
    ends = [e["data"] for e in store.events("cycle_end") if e["data"]["solved"]]
    assert rows and len(rows) == len({r.candidate_id for r in rows}) == len(profiled) <= len(ends)
    fired = [e["data"] for e in store.events("counters")]
    assert fired and "occupancy_limited_by_registers" in fired[0]["rules"]
    wm = WorldModel.from_json(store.latest_world_model())
    node = wm.node(fired[0]["node_id"])
    assert node["counters"]["dram_pct"] and node["impacts"]["register_pressure"]["source"] == "counters"
    verdicts = [e.verdict for e in policy.evidence if e is not None and e.verdict is not None]
    assert any("long_scoreboard" in v.counters for v in verdicts)
    # profile = "off": nothing is profiled.
    profiled.clear()
    cfg_off = RunConfig(task="softmax", backend="mlx-cpu", budget=6, runs_dir=str(tmp_path), stagnation_window=2,
                        profile="off")
    store_off, _, _ = create_run(cfg_off)
    execute(store_off, cfg_off, evaluate=scripted_judge, policy=ScriptedPolicy({"A": [("passed", 2.0)]}),
            profile=profile)
    assert profiled == [] and RunReader(store_off.path).profiles() == []


def test_the_code_prompt_carries_the_counter_line() -> None:
    from ksearch.policy.base import Feedback
    from ksearch.policy.llm.prompts import render

    fb = Feedback(status="passed", message="", score=1.2, speedups={"w": 1.2}, latencies_s={"w": 1e-3},
                  counters=_report().line())
    text = render("_feedback.j2", fb=fb, us=lambda v: "-" if v is None else f"{v * 1e6:.1f}",
                  num=lambda v: "-" if v is None else f"{v:.3f}")
    assert "Profiler counters: DRAM 82% of peak" in text and "| w |" in text
    assert "Profiler counters" not in render("_feedback.j2", fb=Feedback(status="passed", message="", score=1.0),
                                             us=str, num=str)


def test_a_run_without_counter_permission_says_so_once_and_goes_on(tmp_path: Path) -> None:
    note = "ncu has no permission to read the GPU's performance counters (ERR_NVGPUCTRPERM): the run goes on"

    def refused(source: str, result: Any) -> ProfileReport:
        return ProfileReport(status="no_counters", backend="mlx-cuda", workload="w", note=note)

    cfg = RunConfig(task="softmax", backend="mlx-cpu", budget=10, runs_dir=str(tmp_path), stagnation_window=2,
                    profile="all")
    store, _, _ = create_run(cfg)
    seen: list[tuple[str, dict]] = []
    out = execute(store, cfg, on_event=lambda k, d: seen.append((k, d)), evaluate=scripted_judge,
                  policy=ScriptedPolicy({"A": [("passed", 2.0), ("passed", 2.5)], "B": [("passed", 1.0)]}),
                  profile=refused)
    assert out.state.evaluations_done == 10
    assert [d["message"] for k, d in seen if k == "profile_note"] == [note]
    assert len([k for k, _ in seen if k == "profile"]) >= 3 and not store.events("counters")
