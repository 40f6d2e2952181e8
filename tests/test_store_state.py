"""The loop state is committed with every evaluation, but what grows in it is stored once: a commit writes what is
new (a changed source, a new verdict message), not the analysis and every text again."""

from __future__ import annotations

import json
import random
import sqlite3
from pathlib import Path
from typing import Any

from ksearch.store import RunReader, RunStore
from ksearch.store.db import STATE_TEXT_CHARS, TEXT_REF
from ksearch.store.redact import Redactor
from ksearch.store.schema import SCHEMA_VERSION

WORDS = ["fuse", "tile", "vectorise", "reduce", "warp", "shared", "register", "bandwidth", "occupancy", "unroll"]


def text(n_chars: int, seed: int) -> str:
    rng = random.Random(seed)
    out: list[str] = []
    size = 0
    while size < n_chars:
        w = rng.choice(WORDS) + str(rng.randrange(1000))
        out.append(w)
        size += len(w) + 1
    return " ".join(out)


def state(i: int, analysis: str) -> dict[str, Any]:
    """A loop state as the LLM policy's run has it: the analysis twice (the loop's and the policy's), the last
    source and the last verdict's message, both new at every commit."""
    source = f"# variant {i}\n" + text(2000, seed=i)
    return {"round": i // 4, "evaluations_done": i, "analysis": analysis, "visits": {"n1": i},
            "cycle": {"node_id": "n1", "last_feedback": {"status": "runtime_error", "message": text(1500, 10_000 + i)},
                      "attempts": [{"candidate_id": f"c{j:04d}", "message": "short"} for j in range(i % 5)]},
            "policy": {"calls": 2 * i, "analysis": analysis, "last_source": source, "notes": []}}


def commit(store: RunStore, s: dict[str, Any]) -> None:
    with store.transaction():
        store.set_state("loop_state", s)
        store.set_meta("evaluations_done", s["evaluations_done"])


def sizes(path: Path) -> tuple[int, int]:
    db, wal = path / "run.db", path / "run.db-wal"
    return db.stat().st_size, (wal.stat().st_size if wal.exists() else 0)


def test_a_commit_writes_what_is_new_not_the_whole_state(tmp_path: Path) -> None:
    analysis = text(400_000, seed=1)
    store = RunStore(tmp_path / "run", create=True, redactor=Redactor())
    store.db.execute("PRAGMA wal_autocheckpoint=0")  # every page written stays in the WAL: count them
    commit(store, state(0, analysis))
    _, wal_first = sizes(store.path)
    n = 20
    for i in range(1, n + 1):
        commit(store, state(i, analysis))
    _, wal_after = sizes(store.path)
    # Each commit brings about 3.5 KB of new text; allow a few pages of b-tree bookkeeping on top.
    per_commit = (wal_after - wal_first) / n
    assert per_commit < 40_000, per_commit  # rewriting the state would be over 400,000 bytes a commit
    assert store.get_state("loop_state") == state(n, analysis)  # exactly what was committed
    store.close()


def test_the_database_grows_with_new_content_not_with_commits(tmp_path: Path) -> None:
    analysis = text(400_000, seed=2)
    store = RunStore(tmp_path / "run", create=True, redactor=Redactor())

    def settled() -> int:
        store.db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        return sizes(store.path)[0]

    for i in range(10):
        commit(store, state(i, analysis))
    at_10 = settled()
    for i in range(10, 40):
        commit(store, state(i, analysis))
    at_40 = settled()
    # The analysis is stored once (both copies are one text); 30 commits add 30 sources and messages (~3.5 KB each).
    assert at_10 < len(analysis) * 1.15 + 200_000, at_10
    assert at_40 - at_10 < 30 * 3_500 * 2 + 64_000, at_40 - at_10
    stored = json.loads(store.db.execute("SELECT value FROM meta WHERE key = 'loop_state'").fetchone()[0])
    assert len(json.dumps(stored)) < 3 * STATE_TEXT_CHARS + 2_000  # the row itself holds references
    assert stored["analysis"] == stored["policy"]["analysis"] and TEXT_REF in stored["analysis"]
    store.close()


def test_a_text_that_is_a_candidate_source_is_that_candidate_file(tmp_path: Path) -> None:
    store = RunStore(tmp_path / "run", create=True, redactor=Redactor())
    source = "import mlx.core as mx\n\n\ndef run(x):\n" + "    x = x + 1\n" * 100 + "    return x\n"
    with store.transaction():
        store.add_candidate(source, source, 0, "n1", None, "t", "first", {})
        store.set_state("loop_state", {"policy": {"last_source": source}})
    assert store.db.execute("SELECT COUNT(*) FROM texts").fetchone()[0] == 0
    assert store.get_state("loop_state")["policy"]["last_source"] == source
    store.close()


def test_a_run_of_the_previous_layout_resumes_and_is_marked_as_the_new_one(tmp_path: Path) -> None:
    path = tmp_path / "run"
    store = RunStore(path, create=True, redactor=Redactor())
    plain = {"analysis": "a" * 5000, "round": 3}
    store.set_meta("schema_version", 1)
    store.set_meta("loop_state", plain)  # as schema 1 stored it: whole, no references
    store.db.execute("DROP TABLE texts")
    store.close()
    with RunReader(path) as reader:  # a reader needs no texts table
        assert reader.meta().get("loop_state") == plain
    store = RunStore(path)  # continuing it creates the table
    assert store.get_state("loop_state") == plain
    commit(store, {**plain, "evaluations_done": 1})
    assert store.get_meta("schema_version") == SCHEMA_VERSION
    assert store.get_state("loop_state") == {**plain, "evaluations_done": 1}
    store.close()


def test_a_run_of_a_newer_layout_is_refused_for_writing(tmp_path: Path) -> None:
    import pytest

    from ksearch.errors import RunUnreadable

    path = tmp_path / "run"
    RunStore(path, create=True).close()
    db = sqlite3.connect(path / "run.db")
    db.execute("UPDATE meta SET value = ? WHERE key = 'schema_version'", (json.dumps(SCHEMA_VERSION + 1),))
    db.commit()
    db.close()
    with pytest.raises(RunUnreadable, match="newer ksearch"):
        RunStore(path)
