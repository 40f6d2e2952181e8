"""A run, read back for showing: one read-only pass over run.db, plus what the views derive from it.

The search process may still be writing (WAL mode): this reader opens the database read-only so that `report` and
`watch` can never take a write lock or change the schema of a run they merely look at.
"""

from __future__ import annotations

import json
import sqlite3
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ksearch.errors import RunUnreadable
from ksearch.harness.result import EvalResult

NOTABLE_EVENTS = ("backtrack", "too_hard", "edit_rejected", "policy_error")


@dataclass
class Attempt:
    """One search evaluation, in budget order."""

    n: int  # 1-based position in the budget
    candidate_id: str
    status: str
    score: float
    best_so_far: float
    round: int
    action: str | None


@dataclass
class RunData:
    path: Path
    meta: dict[str, Any]
    candidates: list[dict[str, Any]]
    evaluations: list[dict[str, Any]]  # kind == "search", in order
    holdout_evaluations: list[dict[str, Any]]
    world_models: list[dict[str, Any]]  # {"round", "reason", "created_at", "world_model"}
    calls: list[dict[str, Any]]
    events: list[dict[str, Any]]
    attempts: list[Attempt] = field(default_factory=list)

    # -- identity -----------------------------------------------------------------------------------------------
    @property
    def run_id(self) -> str:
        return self.path.name

    @property
    def task(self) -> str:
        return str(self.meta.get("task") or "?")

    @property
    def backend(self) -> str:
        return str(self.meta.get("backend") or "?")

    @property
    def status(self) -> str:
        return str(self.meta.get("status") or "unknown")

    @property
    def budget(self) -> int | None:
        b = self.meta.get("budget")
        return int(b) if isinstance(b, int | float) else None

    @property
    def evaluations_done(self) -> int:
        done = self.meta.get("evaluations_done")
        return int(done) if isinstance(done, int | float) else len(self.evaluations)

    # -- the best candidate -------------------------------------------------------------------------------------
    @property
    def best_candidate(self) -> str | None:
        """The loop's own verdict when it recorded one; otherwise the best passed search evaluation."""
        cid = self.meta.get("best_candidate")
        if isinstance(cid, str) and cid:
            return cid
        passed = [e for e in self.evaluations if e["status"] == "passed" and e["score"] > 0]
        return max(passed, key=lambda e: e["score"])["candidate_id"] if passed else None

    @property
    def best_score(self) -> float:
        s = self.meta.get("best_score")
        if isinstance(s, int | float):
            return float(s)
        return max((a.score for a in self.attempts if a.status == "passed"), default=0.0)

    def best_result(self) -> EvalResult | None:
        cid = self.best_candidate
        rows = [e for e in self.evaluations if e["candidate_id"] == cid]
        if not rows:
            return None
        return _result(max(rows, key=lambda e: e["score"])["result"])

    def holdout_result(self) -> EvalResult | None:
        h = self.meta.get("holdout")
        if isinstance(h, dict) and "status" in h:
            return _result(h)
        rows = [e for e in self.holdout_evaluations if e["candidate_id"] == self.best_candidate]
        return _result(rows[-1]["result"]) if rows else None

    def candidate(self, cid: str | None) -> dict[str, Any] | None:
        return next((c for c in self.candidates if c["id"] == cid), None)

    def source(self, cid: str | None) -> str | None:
        c = self.candidate(cid)
        if c is None:
            return None
        p = self.path / c["path"]
        return p.read_text() if p.is_file() else None

    # -- world model ----------------------------------------------------------------------------------------------
    def world_model(self) -> dict[str, Any] | None:
        return self.world_models[-1]["world_model"] if self.world_models else None

    def best_path(self) -> list[dict[str, Any]]:
        """World-model nodes from the root to the node whose solution is the best candidate (root first)."""
        wm = self.world_model()
        best = self.best_candidate
        if wm is None or best is None:
            return []
        nodes = {str(n.get("node_id")): n for n in wm_nodes(wm)}
        target = next((n for n in nodes.values() if solution_id(n) == best), None)
        if target is None:
            cand = self.candidate(best)
            target = nodes.get(str(cand.get("node_id"))) if cand else None
        path: list[dict[str, Any]] = []
        seen: set[str] = set()
        while target is not None and str(target.get("node_id")) not in seen:
            seen.add(str(target.get("node_id")))
            path.append(target)
            target = nodes.get(str(target.get("parent_id")))
        return path[::-1]

    def best_actions(self) -> list[str]:
        """The path of actions that led to the best, as titles; falls back to the candidates' own lineage."""
        titles = [t for t in (action_title(n) for n in self.best_path()) if t]
        if titles:
            return titles
        chain: list[str] = []
        cand = self.candidate(self.best_candidate)
        seen: set[str] = set()
        while cand is not None and cand["id"] not in seen:
            seen.add(cand["id"])
            if cand.get("action_title"):
                chain.append(str(cand["action_title"]))
            cand = self.candidate(cand.get("parent_id"))
        return chain[::-1]

    def current_action(self) -> str | None:
        selects = [e for e in self.events if e["kind"] == "select"]
        if selects:
            return str(selects[-1]["data"].get("title") or selects[-1]["data"].get("node_id"))
        return str(self.candidates[-1].get("action_title")) if self.candidates else None

    # -- spend ----------------------------------------------------------------------------------------------------
    def llm_usage(self) -> dict[str, float]:
        """Totals from the calls table (authoritative: one row per call); the meta summary only when it has none."""
        if self.calls:
            return {
                "calls": len(self.calls),
                "tokens_in": sum(int(c.get("tokens_in") or 0) for c in self.calls),
                "tokens_out": sum(int(c.get("tokens_out") or 0) for c in self.calls),
                "cost_usd": sum(float(c.get("cost_usd") or 0.0) for c in self.calls),
            }
        u = self.meta.get("llm_usage") or {}
        return {k: float(u.get(k) or 0) for k in ("calls", "tokens_in", "tokens_out", "cost_usd")}

    def spend_by_role(self) -> list[dict[str, Any]]:
        roles: dict[str, dict[str, Any]] = {}
        for c in self.calls:
            r = roles.setdefault(str(c.get("role")), {"role": str(c.get("role")), "calls": 0, "tokens_in": 0,
                                                      "tokens_out": 0, "cost_usd": 0.0, "errors": 0})
            r["calls"] += 1
            r["tokens_in"] += int(c.get("tokens_in") or 0)
            r["tokens_out"] += int(c.get("tokens_out") or 0)
            r["cost_usd"] += float(c.get("cost_usd") or 0.0)
            r["errors"] += 1 if c.get("error") else 0
        return list(roles.values())

    def notable_events(self) -> list[dict[str, Any]]:
        """What the loop did besides evaluating: backtracks, ideas judged too hard, rejected edits, policy errors."""
        return [e for e in self.events if e["kind"] in NOTABLE_EVENTS]

    def status_counts(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for a in self.attempts:
            out[a.status] = out.get(a.status, 0) + 1
        return out


# -- world-model helpers (field names of the K-Search JSON; every field may be missing in a hand-edited snapshot) --
def wm_nodes(wm: dict[str, Any]) -> list[dict[str, Any]]:
    nodes = (wm.get("decision_tree") or {}).get("nodes") or []
    return [n for n in nodes if isinstance(n, dict)]


def action_title(node: dict[str, Any]) -> str | None:
    a = node.get("action")
    if isinstance(a, dict) and a.get("title"):
        return str(a["title"])
    # A node without an action (the root) names what was chosen in `choice`, the question in `decision`.
    return str(node.get("choice") or node.get("decision") or "") or None


def solution_id(node: dict[str, Any]) -> str | None:
    ref = node.get("solution_ref")
    return str(ref["solution_id"]) if isinstance(ref, dict) and ref.get("solution_id") else None


def node_eval(node: dict[str, Any]) -> tuple[str | None, float | None]:
    ref = node.get("solution_ref")
    ev = ref.get("eval") if isinstance(ref, dict) else None
    if not isinstance(ev, dict):
        return None, None
    score = ev.get("score")
    return (str(ev["status"]) if ev.get("status") else None,
            float(score) if isinstance(score, int | float) else None)


def _result(data: dict[str, Any]) -> EvalResult | None:
    try:
        return EvalResult.from_json(data)
    except TypeError:  # a result written by a newer ksearch with extra fields: keep what we know
        known = set(EvalResult.__dataclass_fields__)
        return EvalResult.from_json({k: v for k, v in data.items() if k in known})


def _connect(run_dir: Path) -> sqlite3.Connection:
    db = sqlite3.connect(f"file:{(run_dir / 'run.db').resolve()}?mode=ro", uri=True, timeout=10)
    db.row_factory = sqlite3.Row
    return db


def load_run(run_dir: Path, retries: int = 3) -> RunData:
    """Read a whole run. Retries briefly: a writer checkpointing the WAL can make a read fail with SQLITE_BUSY."""
    for attempt in range(retries):
        try:
            return _load(Path(run_dir))
        except sqlite3.OperationalError as exc:
            if attempt == retries - 1:
                raise RunUnreadable(f"cannot read {run_dir}/run.db: {exc}") from exc
            time.sleep(0.2 * (attempt + 1))
        except sqlite3.DatabaseError as exc:
            raise RunUnreadable(f"cannot read {run_dir}/run.db: {exc}") from exc
    raise AssertionError("unreachable")


def _load(run_dir: Path) -> RunData:
    db = _connect(run_dir)
    try:
        meta = {r["key"]: _loads(r["value"]) for r in db.execute("SELECT key, value FROM meta")}
        candidates = [dict(r) for r in db.execute("SELECT * FROM candidates ORDER BY seq")]
        for c in candidates:
            c["params"] = _loads(c.get("params") or "{}")
        evals = []
        for r in db.execute("SELECT * FROM evaluations ORDER BY id"):
            d = dict(r)
            d["result"] = _loads(d["result"]) or {}
            evals.append(d)
        wms = [{"round": r["round"], "reason": r["reason"], "created_at": r["created_at"],
                "world_model": _loads(r["json"]) or {}}
               for r in db.execute("SELECT round, reason, created_at, json FROM world_models ORDER BY id")]
        calls = [dict(r) for r in db.execute(
            "SELECT id, created_at, round, role, model, tokens_in, tokens_out, latency_s, cost_usd, retries, error "
            "FROM calls ORDER BY id")]
        events = [{**dict(r), "data": _loads(r["data"]) or {}} for r in db.execute("SELECT * FROM events ORDER BY id")]
    finally:
        db.close()
    search = [e for e in evals if e["kind"] == "search"]
    run = RunData(run_dir, meta, candidates, search, [e for e in evals if e["kind"] == "holdout"], wms, calls, events)
    titles = {c["id"]: c.get("action_title") for c in candidates}
    best = 0.0
    for i, e in enumerate(search, 1):
        score = float(e["score"] or 0.0) if e["status"] == "passed" else 0.0
        best = max(best, score)
        run.attempts.append(Attempt(i, e["candidate_id"], e["status"], score, best, e["round"],
                                    titles.get(e["candidate_id"])))
    return run


def _loads(text: str | None) -> Any:
    if text is None:
        return None
    try:
        return json.loads(text)
    except ValueError:
        return text
