"""What a run's tables hold, as typed records: one dataclass per row kind, plus the run's meta.

JSON columns are decoded here and leniently: a reader shows a run even where one value cannot be decoded (a
hand-edited database, a row cut short by a crash) rather than refusing all of it.
"""

from __future__ import annotations

import json
import sqlite3
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


@dataclass
class CandidateRow:
    id: str
    seq: int
    round: int
    node_id: str | None
    parent_id: str | None
    action_title: str | None
    mode: str | None
    params: dict[str, Any]
    path: str  # relative to the run directory
    duplicate_of: str | None
    created_at: float = 0.0

    def source(self, run_dir: Path) -> str:
        return (run_dir / self.path).read_text()


@dataclass(frozen=True)
class EvaluationRow:
    id: int
    candidate_id: str
    eval_index: int  # position in the budget (0-based) when it was recorded
    created_at: float
    round: int
    kind: str  # search (counts against the budget), holdout (the final re-evaluation), baseline
    status: str
    score: float
    holdout_score: float | None
    duration_s: float | None
    message: str | None
    result: dict[str, Any]  # the EvalResult as JSON


@dataclass(frozen=True)
class ProfileRow:
    """One profiled candidate: what the profiler and the compiler said of it (harness/profile.py: ProfileReport)."""

    id: int
    candidate_id: str
    created_at: float
    round: int
    backend: str
    workload: str
    status: str  # counters | no_counters | roofline_only
    note: str | None
    data: dict[str, Any]  # the ProfileReport as JSON


@dataclass(frozen=True)
class CallRow:
    """One LLM call. prompt and response are None when the reader did not ask for the texts (they are large)."""

    id: int
    created_at: float
    round: int
    role: str
    model: str | None
    prompt: str | None
    response: str | None
    tokens_in: int | None
    tokens_out: int | None
    latency_s: float | None
    cost_usd: float | None
    retries: int | None
    error: str | None


@dataclass(frozen=True)
class EventRow:
    id: int
    created_at: float
    round: int
    kind: str
    data: dict[str, Any]


@dataclass(frozen=True)
class WorldModelRow:
    id: int
    round: int
    created_at: float
    reason: str | None
    world_model: dict[str, Any]  # the K-Search JSON


@dataclass(frozen=True)
class RunMeta:
    """The meta table: a JSON value per key. Typed accessors for the keys every run has; `get` for the rest."""

    values: dict[str, Any] = field(default_factory=dict)

    def get(self, key: str, default: Any = None) -> Any:
        return self.values.get(key, default)

    def _str(self, key: str) -> str | None:
        v = self.values.get(key)
        return str(v) if v is not None and v != "" else None

    def _int(self, key: str) -> int | None:
        v = self.values.get(key)
        return int(v) if isinstance(v, int | float) and not isinstance(v, bool) else None

    @property
    def schema_version(self) -> int | None:
        return self._int("schema_version")

    @property
    def task(self) -> str | None:
        return self._str("task")

    @property
    def backend(self) -> str | None:
        return self._str("backend")

    @property
    def policy(self) -> str | None:
        return self._str("policy")

    @property
    def strategy(self) -> str | None:
        return self._str("strategy")

    @property
    def status(self) -> str | None:
        return self._str("status")

    @property
    def shown_status(self) -> str:
        """The status to show: the stored one, or `interrupted` for a run whose search process is gone (owner.py)."""
        from ksearch.store.owner import effective_status

        return effective_status(self.values)

    @property
    def stop_kind(self) -> str | None:
        """Why the run ended, in one word (budget, wall_time, usd_cap, token_cap, endpoint_failure, proposer_failure,
        exhausted, paused, interrupted, error); None while it runs."""
        if self.shown_status == "interrupted":
            return "interrupted"
        return self._str("stop_kind")

    @property
    def stop_reason(self) -> str | None:
        """Why the run ended, in one line; None while it runs."""
        if self.shown_status == "interrupted":
            from ksearch.store.owner import interrupted_reason

            return interrupted_reason(self.values)
        return self._str("stop_reason")

    @property
    def budget(self) -> int | None:
        return self._int("budget")

    @property
    def evaluations_done(self) -> int | None:
        return self._int("evaluations_done")

    @property
    def best_candidate(self) -> str | None:
        return self._str("best_candidate")

    @property
    def best_score(self) -> float | None:
        v = self.values.get("best_score")
        return float(v) if isinstance(v, int | float) and not isinstance(v, bool) else None

    @property
    def holdout(self) -> dict[str, Any] | None:
        """The holdout EvalResult as JSON, once the best has been re-measured."""
        v = self.values.get("holdout")
        return v if isinstance(v, dict) else None

    @property
    def llm_usage(self) -> dict[str, Any]:
        v = self.values.get("llm_usage")
        return v if isinstance(v, dict) else {}


# -- rows -> records (the column names are the schema's) ----------------------------------------------------------
def loads(text: str | None) -> Any:
    """A JSON column's value; the raw text where it is not JSON."""
    if text is None:
        return None
    try:
        return json.loads(text)
    except ValueError:
        return text


def _obj(text: str | None) -> dict[str, Any]:
    v = loads(text)
    return v if isinstance(v, dict) else {}


def candidate_from_row(r: sqlite3.Row) -> CandidateRow:
    return CandidateRow(r["id"], r["seq"], r["round"], r["node_id"], r["parent_id"], r["action_title"], r["mode"],
                        _obj(r["params"]), r["path"], r["duplicate_of"], r["created_at"])


def evaluation_from_row(r: sqlite3.Row) -> EvaluationRow:
    return EvaluationRow(r["id"], r["candidate_id"], r["eval_index"], r["created_at"], r["round"], r["kind"],
                         r["status"], float(r["score"] or 0.0), r["holdout_score"], r["duration_s"], r["message"],
                         _obj(r["result"]))


def profile_from_row(r: sqlite3.Row) -> ProfileRow:
    return ProfileRow(r["id"], r["candidate_id"], r["created_at"], r["round"], r["backend"], r["workload"], r["status"],
                      r["note"], _obj(r["data"]))


def call_from_row(r: sqlite3.Row) -> CallRow:
    keys = r.keys()
    return CallRow(r["id"], r["created_at"], r["round"], r["role"], r["model"],
                   r["prompt"] if "prompt" in keys else None, r["response"] if "response" in keys else None,
                   r["tokens_in"], r["tokens_out"], r["latency_s"], r["cost_usd"], r["retries"], r["error"])


def event_from_row(r: sqlite3.Row) -> EventRow:
    return EventRow(r["id"], r["created_at"], r["round"], r["kind"], _obj(r["data"]))


def world_model_from_row(r: sqlite3.Row) -> WorldModelRow:
    return WorldModelRow(r["id"], r["round"], r["created_at"], r["reason"], _obj(r["json"]))
