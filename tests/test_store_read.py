"""The store's read API: typed records of a run, read-only, and a one-line error for a database it cannot read."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from test_report_fakerun import PLAN, make_fake_run

from ksearch.store import (
    CallRow,
    CandidateRow,
    EvaluationRow,
    RunNotFound,
    RunReader,
    RunStore,
    RunUnreadable,
    list_runs,
    read_run,
)
from ksearch.store.schema import SCHEMA_VERSION

SRC = Path(__file__).resolve().parents[1] / "src"


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_fake_run(tmp_path_factory.mktemp("runs"))


def test_records_of_a_run(run_dir: Path) -> None:
    recs = read_run(run_dir)
    assert recs.path == run_dir
    assert recs.meta.task == "softmax" and recs.meta.backend == "mlx-cpu" and recs.meta.budget == 12
    assert recs.meta.schema_version == SCHEMA_VERSION and recs.meta.get("seed") == 7
    assert recs.meta.best_candidate == "c0007" and recs.meta.holdout is not None
    assert [c.id for c in recs.candidates] == [f"c{i:04d}" for i in range(len(PLAN))]
    assert all(isinstance(c, CandidateRow) for c in recs.candidates)
    assert recs.candidates[3].action_title == "Accumulate in float16" and recs.candidates[3].parent_id == "c0002"
    search, holdout = recs.evaluations_of("search"), recs.evaluations_of("holdout")
    assert [e.status for e in search] == [p[2] for p in PLAN]
    assert all(isinstance(e, EvaluationRow) and isinstance(e.result, dict) for e in recs.evaluations)
    assert [e.candidate_id for e in holdout] == ["c0007"] and holdout[0].result["status"] == "passed"
    assert len(recs.world_models) == 3 and "decision_tree" in recs.world_models[-1].world_model
    assert [e.kind for e in recs.events].count("backtrack") == 1
    # A report needs every call's figures but not the (large) texts.
    assert [c.role for c in recs.calls] == ["analysis", "world_model"]
    assert all(isinstance(c, CallRow) and c.prompt is None and c.response is None for c in recs.calls)


def test_reader_one_table_at_a_time(run_dir: Path) -> None:
    with RunReader(run_dir) as reader:
        assert len(reader.evaluations()) == len(PLAN)  # search by default, as RunStore
        assert {e.kind for e in reader.evaluations(kind=None)} == {"search", "holdout"}
        assert [e.kind for e in reader.events("too_hard")] == ["too_hard"]
        calls = reader.calls(texts=True)
        assert calls[0].prompt == "p" and calls[0].response == "r" and calls[0].tokens_in == 3200
        assert reader.meta().status == "finished"


def test_writer_keeps_its_dict_api(run_dir: Path) -> None:
    store = RunStore(run_dir)
    try:
        e = store.evaluations()[0]
        assert set(e) >= {"id", "candidate_id", "eval_index", "kind", "status", "score", "result"}
        assert isinstance(e["result"], dict)
        assert store.calls()[0]["prompt"] == "p"
        assert store.events("backtrack")[0]["data"] == {"from": "n5", "to": "n6"}
        assert store.get_meta("budget") == 12 and store.meta()["task"] == "softmax"
        assert store.latest_world_model() == read_run(run_dir).world_models[-1].world_model
    finally:
        store.close()


def test_missing_database(tmp_path: Path) -> None:
    with pytest.raises(RunNotFound, match="no run.db"):
        read_run(tmp_path)


def test_not_a_database(tmp_path: Path) -> None:
    (tmp_path / "run.db").write_bytes(b"this is not sqlite" * 100)
    with pytest.raises(RunUnreadable, match=r"cannot read .*run.db: file is not a database"):
        read_run(tmp_path)


def test_a_database_of_something_else(tmp_path: Path) -> None:
    db = sqlite3.connect(tmp_path / "run.db")
    db.execute("CREATE TABLE songs (title TEXT)")
    db.commit()
    db.close()
    with pytest.raises(RunUnreadable, match="not a ksearch run database"):
        read_run(tmp_path)


def test_a_newer_schema_is_refused_in_one_line(tmp_path: Path) -> None:
    store = RunStore(tmp_path / "future", create=True)
    store.set_meta("schema_version", SCHEMA_VERSION + 1)
    store.close()
    with pytest.raises(RunUnreadable) as info:
        read_run(tmp_path / "future")
    assert "newer ksearch" in str(info.value) and "upgrade" in str(info.value) and "\n" not in str(info.value)


def test_reading_never_writes(tmp_path: Path) -> None:
    """A reader opens read-only: it cannot create the tables of an empty database (a writer would)."""
    sqlite3.connect(tmp_path / "run.db").close()
    size = (tmp_path / "run.db").stat().st_size
    with pytest.raises(RunUnreadable):
        RunReader(tmp_path)
    assert (tmp_path / "run.db").stat().st_size == size
    assert not (tmp_path / "run.db-wal").exists()


def test_list_runs_lists_unreadable_ones_with_why(tmp_path: Path) -> None:
    make_fake_run(tmp_path, "good")
    (tmp_path / "broken").mkdir()
    (tmp_path / "broken" / "run.db").write_bytes(b"x" * 4096)
    (tmp_path / "not-a-run").mkdir()
    rows = list_runs(tmp_path)
    assert [r["id"] for r in rows] == ["broken", "good"]
    assert rows[0] == {"id": "broken", "path": str(tmp_path / "broken"), "unreadable": "file is not a database"}
    assert rows[1]["task"] == "softmax" and rows[1]["evaluations_done"] == len(PLAN) and "unreadable" not in rows[1]


WRITER = """
import sys
import time
from ksearch.store import RunStore

store = RunStore(sys.argv[1])
for i in range(int(sys.argv[2])):
    with store.transaction():  # one commit per evaluation, as the search loop does
        row = store.add_candidate(f"x = {i}\\n", f"x = {i}\\n", i, None, None, "act", "improve", {})
        store.add_evaluation(row.id, i + 1, i, "search", {"status": "passed", "score": 1.0 + i})
        store.set_meta("evaluations_done", i + 1)
    time.sleep(0.005)  # a loop's pace, so that the reader's polls fall between commits
store.set_meta("status", "finished")
store.close()
"""


def test_reading_while_another_process_writes(tmp_path: Path) -> None:
    """Every read sees one committed state: as many evaluations as the meta says, each with its candidate."""
    path = tmp_path / "live"
    store = RunStore(path, create=True)
    store.set_meta("status", "running")
    store.close()
    n = 150
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    writer = subprocess.Popen([sys.executable, "-c", textwrap.dedent(WRITER), str(path), str(n)], env=env)
    seen: set[int] = set()
    try:
        deadline = time.time() + 120
        while time.time() < deadline:
            recs = read_run(path)
            done = recs.meta.evaluations_done or 0
            evals = recs.evaluations_of("search")
            assert len(evals) == done
            assert {e.candidate_id for e in evals} <= {c.id for c in recs.candidates}
            seen.add(done)
            if recs.meta.status == "finished":
                break
        assert writer.wait(timeout=60) == 0
    finally:
        if writer.poll() is None:
            writer.kill()
    final = read_run(path)
    assert final.meta.status == "finished" and len(final.evaluations) == n
    assert any(0 < d < n for d in seen)  # the reads did overlap the writing
